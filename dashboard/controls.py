"""Whether the dashboard offers its write controls -- pause, resume, give a task, the links to
the admin -- on this node (seed 002: `api.auth.admin: serve | refuse`; the dashboard's admin
grant is a staff user).

A node whose Tier A says `refuse` serves no admin route: its screens hide the controls, and a
control's POST that arrives anyway is refused 403 naming `api.auth.admin`, as the REST routes
refuse (engine.config.tokens). Read from the process's Tier A, as the socket's tokens are
(dashboard.consumers).
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse

from engine.config.tokens import ADMIN_REFUSED, refuses_admin


def admin_served() -> bool:
    """Whether this node serves the admin routes (the dashboard's controls among them)."""
    return not refuses_admin(getattr(settings, "NODE", None) and settings.NODE.config)


def controls(request: HttpRequest) -> dict[str, Any]:
    """Template context: `admin_served`, which the screens ask before showing a control."""
    return {"admin_served": admin_served()}


def refusal(request: HttpRequest) -> HttpResponse:
    """A control's POST on a node that refuses admin routes: 403 naming the setting (JSON for a
    page script that asked for it)."""
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse({"detail": ADMIN_REFUSED}, status=403)
    return HttpResponseForbidden(ADMIN_REFUSED, content_type="text/plain; charset=utf-8")
