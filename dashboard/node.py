"""What the dashboard needs of the node it runs on (DESIGN.md, "The node is handed down").

`DashboardNode` is the seats app's `SeatsNode` (the dashboard reads and pauses seats through
`seats.queries`) plus what only the screens read: the revision this node applied, its event
store writer, the live projection it runs, and the fleet's history it reads. The projection takes one in its constructor;
the views and the `/ws/stream` consumer read one from the ASGI scope, where the node's own
ASGI layer put it (`engine.node.surface`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from events.fleet import FleetReads
from events.store import EventStoreWriter
from seats.node import SeatsNode

if TYPE_CHECKING:  # the projection takes a DashboardNode itself
    from dashboard.projection import LiveProjection

# Where the node's ASGI layer puts the node in every request's scope: an interface, as
# Channels' "user" is (docs/architecture.md, "The hand-over").
SCOPE_KEY = "crewlet.node"


class DashboardNode(SeatsNode, Protocol):
    """The node as the dashboard sees it."""

    @property
    def revision(self) -> int | None:
        """The generation of the company revision this node applied; None before the first."""

    @property
    def writer(self) -> EventStoreWriter | None:
        """This node's event store writer (a `data` node's), flushed before the history is read."""

    @property
    def projection(self) -> "LiveProjection | None":
        """The live projection this node runs (an `ingress` node's), or None."""

    @property
    def history(self) -> FleetReads:
        """The fleet's history: the log, the trace tree, an event and the projection's seed are
        asked of every live node (events.fleet)."""


def node_in(scope: dict[str, Any]) -> DashboardNode | None:
    """The node a request's ASGI scope carries, or None outside a running node."""
    return scope.get(SCOPE_KEY)
