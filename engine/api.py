"""The company document over REST: `GET /config`, `GET /config/revisions`, `PUT /config`
(seed 002: `crewlet config import` against a running node goes through PUT /config, and every
node converges with no restart).

PUT validates first (422 naming the field), then activates on the fleet's pointer; the
revision row and `config_revision_activated` follow, and every node applies it. The document
is read off the event loop, within the YAML depth and alias budget, and its `${VAR}`
references expand only as `secretfields.api_references` allows. A secret field's value is
never shown back (`secretfields.redact_document`, the one redaction every rendering uses).

crewlet_site mounts the router with the bearer check: reads need the read grant, the write the
admin grant. Each route declares its answer and its refusals (`events.answers`); PUT's body is
the YAML itself, declared as such for /api/openapi.json.
"""
from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Router, Schema
from ninja.errors import HttpError

from engine import revisions
from engine.config import Company, ConfigError, parse_company
from engine.config.secretfields import api_references, node_secrets, redact_document
from engine.config.tokens import Caller
from engine.node.surface import node_in
from events.answers import refusals

router = Router(tags=["config"])


class Revision(Schema):
    id: int
    generation: int | None
    digest: str
    company: str
    imported_by: str
    imported_at: str
    activated_at: str | None
    source: str


class ActiveRevision(Revision):
    document: str


class Revisions(Schema):
    items: list[Revision]


class Activated(Schema):
    generation: int
    digest: str
    revision: Revision | None


YAML_BODY = {"requestBody": {"required": True, "description": "a company document (company.yaml), at most 1 MiB",
                             "content": {"application/yaml": {"schema": {"type": "string"}}}}}

MAX_DOCUMENT_BYTES = 1024 * 1024  # engine.node.gate refuses a larger PUT /config before it is read


def _revision(row) -> dict:
    return {
        "id": row.id,
        "generation": row.generation,
        "digest": row.digest,
        "company": row.company_name,
        "imported_by": row.imported_by,
        "imported_at": row.imported_at.isoformat(),
        "activated_at": row.activated_at.isoformat() if row.activated_at else None,
        "source": row.source,
    }


@router.get("/config", response={200: ActiveRevision, **refusals(404)}, summary="The active company revision")
def get_config(request: HttpRequest):
    row = revisions.latest_activated()
    if row is None:
        raise HttpError(404, "no company revision is active; import one with PUT /config")
    return {**_revision(row), "document": redact_document(row.document)}


@router.get("/config/revisions", response={200: Revisions, **refusals(422)},
            summary="Every revision this node's store holds, newest first")
def get_revisions(request: HttpRequest, limit: int = 100):
    if not 1 <= limit <= 1000:
        raise HttpError(422, "limit: expected an integer from 1 to 1000")
    return {"items": [_revision(r) for r in revisions.list_revisions(limit)]}


@router.put("/config", response={200: Activated, **refusals(413, 422)}, openapi_extra=YAML_BODY,
            summary="Import a company YAML as the new active revision")
async def put_config(request: HttpRequest):
    body = request.body
    if len(body) > MAX_DOCUMENT_BYTES:
        raise HttpError(413, f"body: a company document is at most {MAX_DOCUMENT_BYTES} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise HttpError(422, "body: the company document must be UTF-8 YAML") from None
    node = node_in(request.scope)
    policy = api_references(Company, node_secrets(node.cfg if node is not None else None))
    try:
        company = await asyncio.to_thread(parse_company, text, env=node.env if node is not None else None,
                                          references=policy)
    except ConfigError as exc:
        raise HttpError(422, "; ".join(p.removeprefix("config: ") for p in exc.problems) or str(exc)) from None
    if node is None or node.stopping:
        raise HttpError(503, "this node is not serving; try again shortly")
    caller = request.auth if isinstance(request.auth, Caller) else Caller(str(request.auth or ""))
    activation = await node.activate_document(text, company, str(caller), source="api")
    row = await sync_to_async(revisions.latest_activated, thread_sensitive=True)()
    return {"generation": activation.generation, "digest": activation.digest, "revision": _revision(row) if row else None}
