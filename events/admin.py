"""The event store in Django's admin: read-only, because the log is written by the engine alone."""
from __future__ import annotations

import json
import uuid

from django.contrib import admin
from django.db.models import Exists, OuterRef, Q
from django.utils.html import format_html

from events.models import EventParty, StoredEvent


class ReadOnlyAdmin(admin.ModelAdmin):
    """An admin that browses rows the engine alone writes: no add, change or delete."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class AgentFilter(admin.SimpleListFilter):
    """Every agent an event involves (crewlet_event_parties), not only its agent_id column."""

    title = "agent"
    parameter_name = "agent"

    def lookups(self, request, model_admin):
        # The parties index leads with agent_id, so this is an index walk, not a scan of events.
        agents = EventParty.objects.order_by("agent_id").values_list("agent_id", flat=True).distinct()[:200]
        return [(a, a) for a in agents]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        involved = EventParty.objects.filter(
            agent_id=self.value(), event_time=OuterRef("event_time"), event_id=OuterRef("event_id")
        )
        return queryset.filter(Exists(involved))


@admin.register(StoredEvent)
class StoredEventAdmin(ReadOnlyAdmin):
    list_display = ("event_time", "event_type", "category", "agent_id", "node", "summary")
    list_filter = ("category", "event_type", AgentFilter, "node")
    search_fields = ("=trace_id", "=event_id")
    search_help_text = "An event id or a trace id, exactly."
    ordering = ("-event_time", "-event_id")
    show_full_result_count = False  # a count(*) over the whole log on every page is not worth it
    list_per_page = 50
    fields = (
        "event_time",
        "event_id",
        "event_type",
        "category",
        "feed",
        "source",
        "node",
        "agent_id",
        "agent_role",
        "task_id",
        "channel_id",
        "sender",
        "conversation_key",
        "partition_key",
        "trace_id",
        "span_id",
        "parent_span_id",
        "summary",
        "payload_pretty",
    )
    readonly_fields = fields

    @admin.display(description="payload")
    def payload_pretty(self, obj: StoredEvent) -> str:
        return format_html(
            '<pre style="white-space: pre-wrap; max-width: 100%;">{}</pre>',
            json.dumps(obj.payload, indent=2, sort_keys=True, ensure_ascii=False),
        )

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        # The list never shows the payload; leave the largest column on disk.
        if getattr(request, "resolver_match", None) and request.resolver_match.url_name.endswith("_changelist"):
            queryset = queryset.defer("payload")
        return queryset

    def get_search_results(self, request, queryset, search_term):
        """An exact event id or trace id, each an index seek (the default would LIKE-scan the log)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            as_id = uuid.UUID(term)
        except ValueError:
            return queryset.filter(trace_id=term), False
        # A trace id is 32 hex digits too, so such a term may be either.
        return queryset.filter(Q(event_id=as_id) | Q(trace_id=term)), False
