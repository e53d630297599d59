"""The node's ASGI layer hands the node to every request (DESIGN.md, "The node is handed down";
docs/architecture.md, "The hand-over"): each app finds it under the key the layer writes, and
nothing else in the scope changes."""
from __future__ import annotations

import pytest

import dashboard.node
import events.node
import notify.node
import seats.node
from engine.node.surface import SCOPE_KEY, HandOver, node_in

pytestmark = pytest.mark.timeout(10)


async def _scope_seen(kind: str) -> dict:
    seen: dict = {}

    async def site(scope, receive, send):
        seen.update(scope)

    node = object()
    original = {"type": kind, "path": "/x", "headers": []}
    await HandOver(site, node)(original, None, None)
    assert SCOPE_KEY not in original  # the server's scope is left as it was
    return {"node": node, "scope": seen}


@pytest.mark.parametrize("kind", ["http", "websocket"])
async def test_every_app_reads_the_node_the_layer_hands_over(kind):
    got = await _scope_seen(kind)
    for reader in (notify.node.node_in, seats.node.node_in, dashboard.node.node_in, events.node.node_in, node_in):
        assert reader(got["scope"]) is got["node"], reader.__module__


async def test_a_scope_without_a_node_reads_as_none():
    for reader in (notify.node.node_in, seats.node.node_in, dashboard.node.node_in, events.node.node_in, node_in):
        assert reader({"type": "http"}) is None


async def test_a_lifespan_message_passes_untouched():
    seen: list = []

    async def site(scope, receive, send):
        seen.append(scope)

    await HandOver(site, object())({"type": "lifespan"}, None, None)
    assert seen == [{"type": "lifespan"}]
