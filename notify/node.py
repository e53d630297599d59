"""What the notify app needs of the node it runs on (DESIGN.md, "The node is handed down").

`NotifyNode` is the contract: the notification service takes one in its constructor, and the
webhook edge reads one from the request's ASGI scope, where the node's own ASGI layer put it
(`engine.node.surface`). Anything with these attributes serves -- the engine's Node in a
process, a small dataclass over the queue and coordination twins in a test.
"""
from __future__ import annotations

from typing import Any, Protocol

from engine.config import Company
from engine.coord.contract import CoordStore
from engine.coord.dedupe import Dedupe
from engine.queue.contract import EventQueue
from notify.credentials import Credentials

# Where the node's ASGI layer puts the node in every request's scope: an interface, as
# Channels' "user" is (docs/architecture.md, "The hand-over").
SCOPE_KEY = "crewlet.node"


class NotifyNode(Protocol):
    """The node as notify sees it. Read-only: notify never changes the node."""

    @property
    def node_id(self) -> str:
        """This node's id (Tier A `node.id`)."""

    @property
    def queue(self) -> EventQueue:
        """The event stream: the inbound work queue, the seats' inboxes, the records."""

    @property
    def coord(self) -> CoordStore:
        """The coordination store: the rate valve, thread follows, dedupe slots."""

    @property
    def dedupe(self) -> Dedupe:
        """The fleet's first-claim-wins slots, one per node (its bucket provisioned once)."""

    @property
    def credentials(self) -> Credentials | None:
        """The current company's webhook secrets (sealed under the node's keyring) and users
        maps; None until a company is applied (`notify.credentials.CredentialCache`)."""

    @property
    def company(self) -> Company | None:
        """The revision this node serves; None until the first is applied."""

    @property
    def stopping(self) -> bool:
        """True once the node drains: new deliveries are refused with a retry."""

    @property
    def public_port(self) -> int | None:
        """`api.public.port` when webhooks have a listener of their own, else None."""


def node_in(scope: dict[str, Any]) -> NotifyNode | None:
    """The node a request's ASGI scope carries, or None outside a running node."""
    return scope.get(SCOPE_KEY)
