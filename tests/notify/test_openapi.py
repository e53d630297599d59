"""The webhook route's entry in /api/openapi.json is what the edge answers (notify.openapi).

The route is answered before Django (notify.asgi), so its description is written beside the edge
rather than generated; this holds the two together: every status the document declares is
provoked here through the edge itself, and every answer's body is checked against the schema
the document gives for that status.
"""
from __future__ import annotations

import json

import jsonschema
import pytest

from notify import openapi
from notify.asgi import WebhookEdge
from notify.edge import ROUTE
from notify.sources import SOURCES
from tests.notify import deliveries as d
from tests.notify.test_asgi import call, django
from engine.node.surface import HandOver

pytestmark = pytest.mark.timeout(30)


def check(status: int, body: dict) -> None:
    declared = openapi.paths()[ROUTE]["post"]["responses"]
    assert str(status) in declared, f"{status} is answered but not documented"
    schema = declared[str(status)]["content"]["application/json"]["schema"]
    jsonschema.validate(body, {**schema, "components": {"schemas": openapi.schemas()}})


async def test_every_documented_answer_is_one_the_edge_gives_in_the_shape_documented(node):
    edge = HandOver(WebhookEdge(django), node)
    body = d.dumps(d.github_comment("@octo-alice hi"))
    headers = d.github_headers(body)
    answers: dict[int, dict] = {}
    for path, sent, with_headers in (
        ("/webhooks/github", body, headers),                                   # 202
        ("/webhooks/github", body, headers),                                   # 200: the vendor's retry
        ("/webhooks/github", b"{not json", d.github_headers(b"{not json")),    # 400
        ("/webhooks/github", body, {**headers, "X-Hub-Signature-256": "sha256=00"}),  # 401
        ("/webhooks/nowhere", body, headers),                                  # 404
        ("/webhooks/github", b"x", {**headers, "content-length": str(9 * 1024 * 1024)}),  # 413
    ):
        status, answer, _ = await call(edge, path, sent, headers=with_headers)
        check(status, answer)
        answers[status] = answer
    node.stopping = True
    status, answer, sent_headers = await call(edge, "/webhooks/github", body, headers=headers)
    check(status, answer)
    answers[status] = answer
    assert sent_headers["retry-after"]
    assert set(answers) == {int(code) for code in openapi.paths()[ROUTE]["post"]["responses"]}
    assert answers[401]["header"] == "X-Hub-Signature-256"


def test_the_document_names_every_source_and_asks_for_no_bearer_token():
    post = openapi.paths()[ROUTE]["post"]
    assert post["security"] == []
    assert post["parameters"][0]["schema"]["enum"] == sorted(SOURCES)
    json.dumps(openapi.paths())  # it is JSON, as the site serves it
