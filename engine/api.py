"""The company document over REST: `GET /config`, `GET /config/revisions`, `PUT /config`
(seed 002: `crewlet config import` against a running node goes through PUT /config, and every
node converges with no restart).

PUT validates first (422 naming the field), then activates on the fleet's pointer; the
revision row and `config_revision_activated` follow, and every node applies it. A document
literal that is a secret (not a `${VAR}` reference) is never shown back.
"""
from __future__ import annotations

import re

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Router
from ninja.errors import HttpError

from crewlet_site.auth import TokenAuth
from engine import revisions, runtime
from engine.config import ConfigError, parse_company
from engine.config.redaction import redact_tool_values

router = Router(tags=["config"])

MAX_DOCUMENT_BYTES = 1024 * 1024
_SECRET_LINE = re.compile(r"^(\s*-?\s*(?:[A-Za-z_]*secret|[A-Za-z_]*token|api_key|password)\s*:\s*)(.+)$", re.M)


def redact(document: str) -> str:
    """Hide secret literals; a `${VAR}` reference is kept, since it names no secret."""

    def hide(match: re.Match) -> str:
        value = match.group(2).strip().strip("\"'")
        return match.group(0) if value.startswith("${") else f"{match.group(1)}\"[redacted]\""

    return redact_tool_values(_SECRET_LINE.sub(hide, document))


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


@router.get("/config", auth=TokenAuth("read"), summary="The active company revision")
def get_config(request: HttpRequest):
    row = revisions.latest_activated()
    if row is None:
        raise HttpError(404, "no company revision is active; import one with PUT /config")
    return {**_revision(row), "document": redact(row.document)}


@router.get("/config/revisions", auth=TokenAuth("read"), summary="Every revision this node's store holds, newest first")
def get_revisions(request: HttpRequest, limit: int = 100):
    if not 1 <= limit <= 1000:
        raise HttpError(422, "limit: expected an integer from 1 to 1000")
    return {"items": [_revision(r) for r in revisions.list_revisions(limit)]}


@router.put("/config", auth=TokenAuth("admin"), summary="Import a company YAML as the new active revision")
async def put_config(request: HttpRequest):
    body = request.body
    if len(body) > MAX_DOCUMENT_BYTES:
        raise HttpError(413, f"body: a company document is at most {MAX_DOCUMENT_BYTES} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise HttpError(422, "body: the company document must be UTF-8 YAML") from None
    node = runtime.current()
    try:
        company = parse_company(text, env=node.env if node is not None else None)
    except ConfigError as exc:
        raise HttpError(422, "; ".join(p.removeprefix("config: ") for p in exc.problems) or str(exc)) from None
    if node is None or node.stopping:
        raise HttpError(503, "this node is not serving; try again shortly")
    activation = await node.activate_document(text, company, f"token:{request.auth}", source="api")
    row = await sync_to_async(revisions.latest_activated, thread_sensitive=True)()
    return {"generation": activation.generation, "digest": activation.digest, "revision": _revision(row) if row else None}
