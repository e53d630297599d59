"""Seats' pause state in Django's admin: a read-only page at /admin/seats/pauses/ (seed 000,
"Event Types": seat_paused / seat_resumed; the pause itself is the fleet's record, kept in
the coordination store by `seats.pauses`, so that is what this page reads -- not a table of
this node's, which would only echo the events).

Pausing and resuming is the Seat page's (a staff user's POST) and the REST routes'.
"""
from __future__ import annotations

from asgiref.sync import async_to_sync
from django.contrib import admin
from django.template.response import TemplateResponse
from django.urls import path

from engine import runtime


def _pauses() -> tuple[list[dict], str | None]:
    """Every paused seat as the coordination store records it, or why it cannot be read."""
    node = runtime.current()
    if node is None or getattr(node, "coord", None) is None:
        return [], "this process runs no node, so there is no coordination store to read"
    try:
        from seats.pauses import PauseBook
    except ImportError:
        return [], "this build has no seat pauses"
    try:
        found = async_to_sync(PauseBook(node.coord).all)()
    except Exception as exc:
        return [], f"the coordination store did not answer: {exc}"
    return [found[h].to_dict() for h in sorted(found)], None


def seat_pauses_view(request):
    rows, problem = _pauses()
    context = {**admin.site.each_context(request), "title": "Seat pauses", "rows": rows, "problem": problem}
    return TemplateResponse(request, "admin/dashboard/seat_pauses.html", context)


_site_urls = admin.site.get_urls


def _get_urls():
    return [path("seats/pauses/", admin.site.admin_view(seat_pauses_view), name="seat_pauses"), *_site_urls()]


admin.site.get_urls = _get_urls
