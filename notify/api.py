"""The webhook edge over HTTP: `POST /webhooks/{source}` (the checks and answers are in
`notify.edge`; seed 000, "Distributed Tracing"; seed 002, "Exposing webhooks without the admin
API"). Every answer is JSON; every error is `{"detail": ...}` naming the header or field.

The body is read from the request stream rather than `request.body`, whose in-memory cap
(Django's 2.5 MB) is below the 8 MiB a delivery may carry. Mounted in crewlet_site/asgi.py,
`notify.asgi.WebhookEdge` answers the same path before Django does, through the same edge.
"""
from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from ninja import Router

from engine import runtime
from notify import edge
from notify.sources.base import MAX_BODY_BYTES

router = Router(tags=["webhooks"])


@router.post("/webhooks/{source}", summary="Receive one vendor delivery (Slack, GitHub, GitLab, Jira, Mattermost)")
async def receive_webhook(request: HttpRequest, source: str):
    node = runtime.current()
    if node is None:
        answer = edge.refuse(503, "starting: this process runs no node yet; retry")
    else:
        length = _content_length(request)
        body = request.read(MAX_BODY_BYTES + 1) if length <= MAX_BODY_BYTES else None
        answer = await edge.receive(node, source, request.headers, body, content_length=length,
                                    listener_port=_port(request))
    response = JsonResponse(answer.body, status=answer.status)
    for name, value in answer.headers.items():
        response[name] = value
    return response


def _content_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _port(request: HttpRequest) -> int | None:
    try:
        return int(request.META.get("SERVER_PORT") or 0) or None
    except ValueError:
        return None
