"""An in-process node for the notification service: the real queue twin and coordination twin,
a real keyring and a company parsed from YAML with its secrets from an environment -- a
`notify.node.NotifyNode`, as the engine's Node is one. The HTTP and end-to-end cases run a real
node process instead (tests/node/harness.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from engine.config import parse_company
from engine.coord.dedupe import Dedupe
from engine.coord.local import LocalCoord
from engine.config.keyring import Keyring
from engine.queue import topics
from engine.queue.memory import MemoryBroker
from events.envelope import Event
from notify import edge
from notify.credentials import CredentialCache, Credentials
from notify.service import NotificationService
from tests.conftest import KEY_MATERIAL
from tests.notify.deliveries import ENV, company_yaml


@dataclass
class RoutingNode:
    """A `notify.node.NotifyNode` built from the real twins."""

    queue: Any
    coord: Any
    company: Any
    keyring: Any
    node_id: str = "node-1"
    public_port: int | None = None
    stopping: bool = False
    published: list[tuple[str, Event]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.dedupe = Dedupe(self.coord, node_id=self.node_id)
        self._credentials = CredentialCache(self.keyring)

    @property
    def credentials(self) -> Credentials | None:
        return self._credentials.of(self.company)

    def on_publish(self, topic: str, event: Event) -> None:
        self.published.append((topic, event))

    def events(self, type_name: str) -> list[Event]:
        return [e for _, e in self.published if e.type == type_name]

    def wakes(self, handle: str | None = None) -> list[Event]:
        return [e for t, e in self.published if topics.handle_of(t) and (handle is None or topics.handle_of(t) == handle)]

    def skips(self) -> list[Event]:
        return self.events("notification_skipped")

    async def deliver(self, source: str, headers: dict, body: bytes) -> edge.Answer:
        """The edge's answer to one delivery (the raw_webhook it publishes is in `published`)."""
        return await edge.receive(self, source, headers, body, content_length=len(body))

    def raw(self) -> Event:
        """The last delivery the edge put on the work queue."""
        return [e for t, e in self.published if t == topics.NOTIFICATIONS_INBOUND][-1]


async def make_node(company_text: str | None = None, env: dict | None = None) -> RoutingNode:
    broker = MemoryBroker()
    queue = broker.client("node-1")
    company = parse_company(company_text or company_yaml(), env={**ENV, **(env or {})})
    node = RoutingNode(queue=queue, coord=LocalCoord(), company=company,
                       keyring=Keyring.from_pairs([("k1", KEY_MATERIAL)], "k1"))
    queue.add_publish_listener(node.on_publish)
    for seat in company.agent_seats():
        await queue.ensure_subscription(topics.agent_inbox(seat.handle), topics.inbox_group(seat.handle))
    await edge.ensure_work_queue(queue)  # as the node does while it prepares
    return node


@pytest.fixture
async def node():
    made = await make_node()
    yield made
    await made.queue.close()


@pytest.fixture
async def service(node):
    """The service over the in-process node, not attached: tests call its `route` step."""
    return NotificationService(node)
