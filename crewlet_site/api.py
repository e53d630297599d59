"""The one NinjaAPI: every app mounts its own Router here with the bearer check (STYLE.md,
"Layout"; crewlet_site.auth): a read needs the read grant, a write the admin grant. No app
knows how a caller is admitted.

Every error leaves as JSON `{"detail": ...}`: an app's refusal with the status it carries, a
handler's unexpected exception logged and answered 500 without a traceback.
"""
from __future__ import annotations

import logging

from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from a2a.errors import A2ARefused
from crewlet_site.auth import TokenAuth
from engine.queue.contract import QueueError
from seats.errors import SeatRefused

log = logging.getLogger("api")

from crewlet_site.browser import docs_page  # noqa: E402


class CrewletAPI(NinjaAPI):
    """The site's NinjaAPI, whose OpenAPI document also lists `POST /webhooks/{source}`: that route
    is answered by notify's ASGI edge before Django (asgi.py), so no router declares it, and its
    description comes from the edge's own module (notify.openapi) rather than a stub here."""

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        from notify import openapi as webhooks

        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        schema["paths"].update(webhooks.paths())
        schema.setdefault("components", {}).setdefault("schemas", {}).update(webhooks.schemas())
        return schema


DESCRIPTION = ("The node's REST API. Every route but the webhooks takes a bearer token from `api.auth.tokens` "
               "(`Authorization: Bearer ...`): a read needs the read or the admin grant, a write the admin grant. "
               "Every refusal is JSON `{\"detail\": ...}` naming the field, header or parameter.")
api = CrewletAPI(title="Crewlet", version="1", description=DESCRIPTION, docs_url="/api/docs", openapi_url="/api/openapi.json",
                 urls_namespace="api", docs=docs_page())


def _field(loc) -> str:
    parts = [str(p) for p in loc if p not in ("query", "body", "path", "header", "payload")]
    return ".".join(parts) or "request"


@api.exception_handler(ValidationError)
def _validation(request: HttpRequest, exc: ValidationError):
    problems = [f"{_field(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors]
    log.info("api_request_refused", extra={"path": request.path, "status": 422, "fields": ",".join(
        _field(e.get("loc", ())) for e in exc.errors)})
    return api.create_response(request, {"detail": "; ".join(problems) or "invalid request"}, status=422)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError):
    return api.create_response(
        request,
        {"detail": "Authorization: a bearer token from api.auth.tokens is required"},
        status=401,
    )


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError):
    if exc.status_code in (400, 413, 422):  # bad input: one line naming the route, never a traceback
        log.info("api_request_refused", extra={"path": request.path, "status": exc.status_code})
    return api.create_response(request, {"detail": str(exc)}, status=exc.status_code)


@api.exception_handler(SeatRefused)
def _seat_refused(request: HttpRequest, exc: SeatRefused):
    return api.create_response(request, {"detail": exc.detail}, status=exc.status)


@api.exception_handler(QueueError)
def _not_taken(request: HttpRequest, exc: QueueError):
    """The broker did not take a write (a stream between leaders, a link down): nothing was
    accepted, so the caller is told to try again rather than shown an internal error."""
    log.warning("api_queue_unavailable", extra={"path": request.path, "error": str(exc)})
    response = api.create_response(request, {"detail": f"the event stream did not take it; try again ({exc})"}, status=503)
    response["Retry-After"] = "1"
    return response


@api.exception_handler(A2ARefused)
def _a2a_refused(request: HttpRequest, exc: A2ARefused):
    return api.create_response(request, {"detail": exc.detail}, status=exc.status)


@api.exception_handler(Exception)
def _unexpected(request: HttpRequest, exc: Exception):
    log.exception("api_unhandled_error", extra={"path": request.path})
    return api.create_response(request, {"detail": "internal error; the node logged it"}, status=500)


def mount_routers() -> None:
    """Attach each app's Routers with their grants; called once from urls.py. (The webhook
    routes are answered before Django, by notify's ASGI edge: crewlet_site/asgi.py.)"""
    from a2a import api as a2a_api
    from engine import api as engine_api
    from events import api as events_api
    from seats import api as seats_api

    bearer = TokenAuth()
    api.add_router("/events", events_api.router, auth=bearer)
    api.add_router("", engine_api.router, auth=bearer)
    api.add_router("", seats_api.router, auth=bearer)
    api.add_router("", a2a_api.router, auth=bearer)
