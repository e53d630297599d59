"""Seats' pause state in Django's admin: a read-only page at /admin/seats/pauses/ (seed 000,
"Event Types": seat_paused / seat_resumed; the pause itself is the fleet's record, kept in
the coordination store by `seats.pauses`, so that is what this page reads -- not a table of
this node's, which would only echo the events).

The page is mounted by the site's admin (crewlet_site.admin.CrewletAdminSite). Pausing and
resuming is the Seat page's (a staff user's POST) and the REST routes'.
"""
from __future__ import annotations

from asgiref.sync import async_to_sync
from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse

from dashboard.node import DashboardNode, node_in


def _pauses(node: DashboardNode | None) -> tuple[list[dict], str | None]:
    """Every paused seat as the coordination store records it, or why it cannot be read."""
    if node is None:
        return [], "this process runs no node, so there is no coordination store to read"
    try:
        found = async_to_sync(node.pauses.all)()
    except Exception as exc:
        return [], f"the coordination store did not answer: {exc}"
    return [found[h].to_dict() for h in sorted(found)], None


def seat_pauses_view(request: HttpRequest) -> TemplateResponse:
    rows, problem = _pauses(node_in(request.scope))
    context = {**admin.site.each_context(request), "title": "Seat pauses", "rows": rows, "problem": problem}
    return TemplateResponse(request, "admin/dashboard/seat_pauses.html", context)
