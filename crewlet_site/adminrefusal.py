"""`api.auth.admin: refuse` at /admin/ (seed 002: `admin: serve | refuse`): on a node that
refuses the admin routes, every page under /admin/ -- its sign-in page too -- is a 403 naming
the setting (templates/403.html), before a session is read or a password checked. The API's
writes are refused by the bearer check (crewlet_site.auth), the dashboard's controls by
dashboard.controls; all three ask `engine.config.tokens.refuses_admin`.
"""
from __future__ import annotations

import logging

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.utils.decorators import sync_and_async_middleware

from engine.config.tokens import ADMIN_REFUSED, refuses_admin

log = logging.getLogger("api.auth")

ADMIN_PREFIX = "/admin/"


def _refuse(request) -> None:
    if request.path.startswith(ADMIN_PREFIX) and refuses_admin(settings.NODE.config):
        log.info("admin_site_refused", extra={"path": request.path})
        raise PermissionDenied(ADMIN_REFUSED)


@sync_and_async_middleware
def admin_refusal(get_response):
    """The middleware: /admin/ refused on a node that refuses admin routes, else passed on."""
    if iscoroutinefunction(get_response):
        async def middleware(request):
            _refuse(request)
            return await get_response(request)
    else:
        def middleware(request):
            _refuse(request)
            return get_response(request)
    return middleware
