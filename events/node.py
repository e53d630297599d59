"""What the events app needs of the node it runs on (DESIGN.md, "The node is handed down").

`EventsNode` is the contract: the REST routes read one from the request's ASGI scope, where
the node's own ASGI layer put it (`engine.node.surface`), and ask the fleet's history through
it. Outside a running node (a test's client, `manage.py runserver`) there is none, and the
routes read this process's store alone, saying so in the answer's coverage.
"""
from __future__ import annotations

from typing import Any, Protocol

from events.fleet import FleetReads

# Where the node's ASGI layer puts the node in every request's scope: an interface, as
# Channels' "user" is (docs/architecture.md, "The hand-over").
SCOPE_KEY = "crewlet.node"


class EventsNode(Protocol):
    """The node as the events app sees it."""

    @property
    def history(self) -> FleetReads:
        """The fleet's history: this node's store and every live peer's, asked at one instant."""


def node_in(scope: dict[str, Any] | None) -> EventsNode | None:
    """The node a request's ASGI scope carries, or None outside a running node."""
    return (scope or {}).get(SCOPE_KEY)


def history_of(scope: dict[str, Any] | None) -> FleetReads:
    """The node's fleet reads, or this process's store alone when no node serves the request."""
    node = node_in(scope)
    return node.history if node is not None else FleetReads(node_id="local")
