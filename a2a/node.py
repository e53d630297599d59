"""What the a2a app needs of the node it runs on (DESIGN.md, "The node is handed down").

`A2ANode` is the contract: `a2a.service.ask` (which the `a2a_ask` tool and the operator's
`POST /a2a/ask` call), the answering seat host's `answer`, the maintenance duty's `sweep` and
the REST reads take one. The engine's Node serves it in a process; the seats app's `SeatsNode`
is one too, so a seat host hands its own node over; a small dataclass over the queue and
coordination twins serves it in a test.
"""
from __future__ import annotations

from typing import Any, Protocol

from engine.config import Company
from engine.coord.contract import CoordStore
from engine.queue.contract import EventQueue

# Where the node's ASGI layer puts the node in every request's scope: an interface, as
# Channels' "user" is (docs/architecture.md, "The hand-over").
SCOPE_KEY = "crewlet.node"


class A2ANode(Protocol):
    """The node as the a2a app sees it. Read-only: a2a never changes the node."""

    @property
    def node_id(self) -> str:
        """This node's id (Tier A `node.id`)."""

    @property
    def queue(self) -> EventQueue:
        """The event stream: both seats' inboxes (the wakes) and the records."""

    @property
    def coord(self) -> CoordStore:
        """The coordination store: the channels slot (`crewlet_channels`)."""

    @property
    def company(self) -> Company | None:
        """The revision this node serves; None until the first is applied. Read on every ask,
        never captured, so an applied revision re-routes from the next ask on."""

    @property
    def stopping(self) -> bool:
        """True once the node drains."""


def node_in(scope: dict[str, Any]) -> A2ANode | None:
    """The node a request's ASGI scope carries, or None outside a running node."""
    return scope.get(SCOPE_KEY)
