"""What the seats app needs of the node it runs on (DESIGN.md, "The node is handed down").

`SeatsNode` is the contract: the seat runtime, the maintenance duty and the budget meters take
one in their constructor; the REST routes read one from the request's ASGI scope, where the
node's own ASGI layer put it (`engine.node.surface`). The engine's Node serves it in a process;
a small dataclass over the queue and coordination twins serves it in a test.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from engine.config import Company
from engine.coord.contract import CoordStore
from engine.coord.leases import LeaseManager
from engine.queue.contract import EventQueue
from seats.budgets import Budgets
from seats.pauses import PauseBook

if TYPE_CHECKING:  # the runtime takes a SeatsNode itself
    from seats.runtime import SeatRuntime

# Where the node's ASGI layer puts the node in every request's scope: an interface, as
# Channels' "user" is (docs/architecture.md, "The hand-over").
SCOPE_KEY = "crewlet.node"


class SeatsNode(Protocol):
    """The node as the seats app sees it."""

    @property
    def node_id(self) -> str:
        """This node's id (Tier A `node.id`)."""

    @property
    def queue(self) -> EventQueue:
        """The event stream: the seats' inboxes and control mailboxes, the records."""

    @property
    def coord(self) -> CoordStore:
        """The coordination store: the ledger, the pauses, the budget counters, duty leases."""

    @property
    def leases(self) -> LeaseManager:
        """Seat, presence and duty leases with their fencing epochs."""

    @property
    def pauses(self) -> PauseBook:
        """The fleet's pause records, one book per node."""

    @property
    def budgets(self) -> Budgets:
        """The token budgets' counters, one per node, so every refusal reaches the meters."""

    @property
    def company(self) -> Company | None:
        """The revision this node serves; None until the first is applied."""

    @property
    def stopping(self) -> bool:
        """True once the node drains."""

    @property
    def max_concurrent(self) -> int:
        """Turns this node runs at once (Tier A `node.max_concurrent`)."""

    @property
    def sweep_seconds(self) -> float:
        """How often the node's backstop polls run (Tier A `node.sweep_seconds`)."""

    @property
    def seat_runtime(self) -> "SeatRuntime | None":
        """The seat hosts this node runs; None on a node without the seats role."""


def node_in(scope: dict[str, Any]) -> SeatsNode | None:
    """The node a request's ASGI scope carries, or None outside a running node."""
    return scope.get(SCOPE_KEY)
