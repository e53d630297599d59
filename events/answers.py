"""The refusal every REST route answers with, declared once (STYLE.md, "Errors": "HTTP errors are
JSON `{"detail": ...}` naming the field").

Each app's router declares, beside its success, the refusals it really gives: `refusals(404, 422)`
is `{401, 403, 404, 422, 503: Detail}` -- every route sits behind the bearer check (401 without a
token, 403 without the grant; crewlet_site.auth) and behind the node's probe gate (503 with
Retry-After while the node starts or drains; engine.node.probes); a route that takes input adds
422 (crewlet_site.api names the field), one with a JSON body 400 (a body that is not JSON), one
that looks something up 404. The OpenAPI document at /api/openapi.json is built from these declarations, so
what it says a route answers is what the route answers.
"""
from __future__ import annotations

from ninja import Schema

BEARER_REFUSALS = (401, 403)  # no token, or a token without the grant the route needs
NOT_SERVING = 503             # the node starts or drains (or serves no company yet)


class Detail(Schema):
    """A refusal: what was wrong, naming the field, header or parameter."""

    detail: str


def refusals(*statuses: int) -> dict[int, type[Detail]]:
    """The refusals a route declares: the bearer check's, the probe gate's, and `statuses`."""
    return {status: Detail for status in sorted({*BEARER_REFUSALS, NOT_SERVING, *statuses})}
