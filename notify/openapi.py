"""`POST /webhooks/{source}` as an OpenAPI path, from the edge that answers it.

The webhook route is answered before Django, by `notify.asgi.WebhookEdge` (crewlet_site/asgi.py),
so no django-ninja router declares it. The site's NinjaAPI merges what this module returns into
/api/openapi.json (crewlet_site.api), so the document lists the route with the answers
`notify.edge.receive` really gives -- its docstring's table, status by status -- and a test holds
the two together (tests/notify/test_openapi.py).
"""
from __future__ import annotations

from typing import Any

from notify.edge import RETRY_AFTER_SECONDS, ROUTE
from notify.sources import SOURCES
from notify.sources.base import MAX_BODY_BYTES

_REFUSED = {"$ref": "#/components/schemas/WebhookRefused"}


def _json(description: str, schema: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}, **more}


def schemas() -> dict[str, Any]:
    """The component schemas the path refers to."""
    return {
        "WebhookAccepted": {
            "type": "object", "required": ["status", "delivery_id", "trace_id"],
            "properties": {"status": {"type": "string", "enum": ["accepted"]}, "delivery_id": {"type": "string"},
                           "trace_id": {"type": "string", "description": "the trace every turn the delivery wakes joins"}},
        },
        "WebhookAnswered": {
            "type": "object",
            "description": "a vendor's retry of a delivery already taken, or Slack's url_verification challenge",
            "properties": {"status": {"type": "string", "enum": ["duplicate"]}, "delivery_id": {"type": "string"},
                           "challenge": {"type": "string"}},
        },
        "WebhookRefused": {
            "type": "object", "required": ["detail"],
            "properties": {"detail": {"type": "string"},
                           "header": {"type": "string", "description": "the signature header that was wrong or missing"},
                           "hint": {"type": "string", "description": "how to reach a route that exists"}},
        },
    }


def paths() -> dict[str, Any]:
    """The webhook route's path item: one POST per source, authenticated by the vendor's signature."""
    return {ROUTE: {"post": {
        "tags": ["webhooks"],
        "operationId": "notify_edge_receive",
        "summary": "Take a vendor's signed delivery (answered by the webhook edge, before Django)",
        "description": ("Verified with the secret in the company's integrations block (Slack's signing secret, GitHub's "
                        "X-Hub-Signature-256, GitLab's X-Gitlab-Token, Jira's X-Hub-Signature, Mattermost's token), "
                        "answered at once and routed behind the queue to each agent recipient's inbox."),
        "security": [],
        "parameters": [{"name": "source", "in": "path", "required": True,
                        "schema": {"type": "string", "enum": sorted(SOURCES)}}],
        "requestBody": {"required": True, "description": f"the vendor's payload as it signed it, at most {MAX_BODY_BYTES} bytes",
                        "content": {"application/json": {"schema": {"type": "object"}}}},
        "responses": {
            "202": _json("taken: on the work queue, and recorded", {"$ref": "#/components/schemas/WebhookAccepted"},
                         headers={"traceparent": {"schema": {"type": "string"}}}),
            "200": _json("a retry of a delivery already taken, or Slack's challenge", {"$ref": "#/components/schemas/WebhookAnswered"}),
            "400": _json("the payload cannot be read (recorded as notification_skipped)", _REFUSED),
            "401": _json("the signature is wrong or missing; `header` names which", _REFUSED),
            "404": _json("no such source, or the company does not connect it", _REFUSED),
            "413": _json(f"the body is over {MAX_BODY_BYTES} bytes", _REFUSED),
            "503": _json("the node is starting or draining", _REFUSED,
                         headers={"Retry-After": {"schema": {"type": "integer", "example": RETRY_AFTER_SECONDS}}}),
        },
    }}}
