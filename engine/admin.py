"""Company revisions in Django's admin (seed 002, "Running the Engine + API": a revision is
imported, activated on the fleet's pointer, and applied by every node without a restart).

Read-only: a revision is a record of what was imported, by whom and when. The document is
shown with its secret literals redacted (`engine.config.secretfields.redact_document`, as GET /config shows it), and
never in its raw form. "Activate this revision" makes one stored revision the fleet's active
one through the running node -- the same `Node.activate_document` PUT /config calls -- so
the pointer, the revision row and `config_revision_activated` follow as they do there.
"""
from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from django.contrib import admin, messages
from django.utils.html import format_html

from engine.config import ConfigError, parse_company
from engine.config.secretfields import redact_document as redact
from engine.models import CompanyRevision
from engine.node.surface import node_in
from events.admin import ReadOnlyAdmin

log = logging.getLogger("engine.admin")


@admin.register(CompanyRevision)
class CompanyRevisionAdmin(ReadOnlyAdmin):
    list_display = ("generation_label", "company_name", "imported_by", "imported_at", "activated_at", "source", "short_digest")
    list_filter = ("source", "company_name")
    search_fields = ("=digest", "imported_by", "company_name")
    ordering = ("-id",)
    actions = ("activate_revision",)
    fields = ("company_name", "generation", "digest", "imported_by", "imported_at", "activated_at", "source", "document_redacted")
    readonly_fields = fields

    @admin.display(description="generation", ordering="generation")
    def generation_label(self, obj: CompanyRevision) -> str:
        return str(obj.generation) if obj.generation else "never activated"

    @admin.display(description="digest")
    def short_digest(self, obj: CompanyRevision) -> str:
        return obj.digest[:12]

    @admin.display(description="document (secret literals redacted)")
    def document_redacted(self, obj: CompanyRevision) -> str:
        return format_html('<pre class="crewlet-document">{}</pre>', redact(obj.document))

    @admin.action(description="Activate this revision (on every node)", permissions=("activate",))
    def activate_revision(self, request, queryset) -> None:
        rows = list(queryset[:2])
        if len(rows) != 1:
            self.message_user(request, "Select exactly one revision to activate.", messages.WARNING)
            return
        row = rows[0]
        node = node_in(request.scope)
        if node is None or node.stopping:
            self.message_user(request, "This process runs no serving node: start it with `manage.py crewlet_node`, "
                                       "or activate with PUT /config.", messages.ERROR)
            return
        try:
            company = parse_company(row.document, env=node.env)
        except ConfigError as exc:
            self.message_user(request, f"Refused, the active revision keeps serving: {exc}", messages.ERROR)
            return
        who = request.user.get_username()  # a person, by the name they sign in with
        # The admin runs on Django's sync thread; the node lives on the event loop.
        activation = async_to_sync(node.activate_document)(row.document, company, who, source="admin")
        log.info("config_revision_activated_from_admin", extra={"generation": activation.generation, "by": who})
        self.message_user(request, f"Generation {activation.generation} ({activation.digest[:12]}) is the active revision; "
                                   "every node applies it within a poll.", messages.SUCCESS)

    def has_activate_permission(self, request) -> bool:
        return request.user.is_superuser or request.user.has_perm("engine.change_companyrevision")

