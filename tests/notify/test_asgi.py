"""The ASGI webhook layer and the api.public surface, driven through the ASGI protocol itself
(seed 002, "Exposing webhooks without the admin API": "Both sockets go through the one drain
gate: from the first moment of a drain the webhook routes answer 503 with a Retry-After on the
public listener"; the public listener answers every other route as a path nothing serves)."""
from __future__ import annotations

import json

import pytest

from engine.node.probes import DRAINING, PREPARING, SERVING, NodeState
from engine.node.surface import HandOver, PublicListener
from notify.asgi import WebhookEdge, not_found
from tests.notify import deliveries as d

pytestmark = pytest.mark.timeout(30)

API_PORT, PUBLIC_PORT = 8000, 8443


async def call(app, path: str, body: bytes = b"", *, method: str = "POST", headers: dict | None = None,
               port: int = API_PORT, chunks: int = 1):
    """(status, JSON body, headers) of one HTTP request made to `app` over ASGI."""
    scope = {"type": "http", "method": method, "path": path, "server": ("127.0.0.1", port),
             "headers": [(k.lower().encode(), str(v).encode()) for k, v in (headers or {}).items()]}
    size = max(1, len(body) // chunks)
    parts = [body[i:i + size] for i in range(0, len(body), size)] or [b""]
    messages = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
    sent: list[dict] = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start, payload = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], json.loads(payload), {k.decode(): v.decode() for k, v in start["headers"]}


async def django(scope, receive, send):
    """Stands for the rest of the site: a request the layer hands on lands here."""
    await send({"type": "http.response.start", "status": 299, "headers": []})
    await send({"type": "http.response.body", "body": b'{"site": true}'})


@pytest.fixture
def running(node):
    return node


async def test_the_layer_takes_webhook_posts_and_hands_every_other_request_on(running):
    layer = HandOver(WebhookEdge(django), running)
    body = d.dumps(d.github_comment("@octo-alice hi"))
    status, answer, _ = await call(layer, "/webhooks/github", body, headers=d.github_headers(body), chunks=3)
    assert status == 202 and answer["status"] == "accepted"
    for path, method in (("/webhooks/github", "GET"), ("/webhooks/github/extra", "POST"), ("/events", "POST")):
        assert (await call(layer, path, method=method))[0] == 299
    status, answer, _ = await call(layer, "/webhooks/github", b"x" * 64, headers={**d.github_headers(b"x"), "content-length": "9999999999"})
    assert status == 413


async def test_a_body_that_outgrows_8_mib_while_streaming_is_a_413(running):
    body = b"x" * (8 * 1024 * 1024 + 1)
    status, answer, _ = await call(HandOver(WebhookEdge(django), running), "/webhooks/github", body,
                                   headers=d.github_headers(body), chunks=4)
    assert status == 413 and "8 MiB" in answer["detail"]


async def test_the_public_listener_serves_webhooks_behind_the_drain_gate_and_nothing_else(running):
    state = NodeState(node_id="node-1", roles=("data", "ingress"), phase=SERVING)
    public = PublicListener(HandOver(WebhookEdge(django), running), PUBLIC_PORT, state,
                            HandOver(WebhookEdge(not_found), running))
    running.public_port = PUBLIC_PORT
    body = d.dumps(d.github_comment("@octo-alice hi"))
    status, _, _ = await call(public, "/webhooks/github", body, headers=d.github_headers(body), port=PUBLIC_PORT)
    assert status == 202
    status, answer, _ = await call(public, "/webhooks/github", body, headers=d.github_headers(body), port=API_PORT)
    assert status == 404 and "api.public" in answer["hint"]  # api.port, through the layer
    for path in ("/health", "/config", "/dashboard/"):
        assert (await call(public, path, method="GET", port=PUBLIC_PORT))[:2] == (404, {"detail": f"not found: {path}"})
    assert (await call(public, "/events", method="GET", port=API_PORT))[0] == 299  # api.port's own routes go on
    for phase in (PREPARING, DRAINING):
        state.phase = phase
        status, answer, headers = await call(public, "/webhooks/github", body, headers=d.github_headers(body), port=PUBLIC_PORT)
        assert status == 503 and headers["retry-after"] == "5"


async def test_a_fault_inside_the_edge_is_a_500_naming_nothing_and_the_next_delivery_is_served(running):
    layer = HandOver(WebhookEdge(django), running)
    body = d.dumps(d.github_comment("@octo-alice hi"))
    dedupe, running.dedupe = running.dedupe, None  # the dedupe slots gone from under the edge
    status, answer, _ = await call(layer, "/webhooks/github", body, headers=d.github_headers(body))
    assert (status, answer) == (500, {"detail": "internal error; the node logged it"})
    running.dedupe = dedupe
    assert (await call(layer, "/webhooks/github", body, headers=d.github_headers(body)))[0] == 202
