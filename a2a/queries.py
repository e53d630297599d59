"""The A2A channels' reads and the operator's ask as plain functions of the node (seed 000,
"Ephemeral A2A channels": "Closed records stay readable until then: closed is the answer to
'why did my reply bounce', while a vanished record is indistinguishable from a typo'd channel
id").

The REST routes (`a2a.api`) and the dashboard's Seat page call these same functions. Any node
answers: the records are the fleet's, in the coordination store. A refusal is an `A2ARefused`
carrying the status the REST route answers with and a detail naming what was wrong.
"""
from __future__ import annotations

import uuid
from typing import Any

from a2a.channels import CLOSED, OPEN, ChannelBook
from a2a.errors import A2ARefused
from a2a.node import A2ANode
from a2a.service import AskOutcome, ask
from engine.config import Company
from events.tracing import trace_of

STATES = (OPEN, CLOSED)


def serving(node: A2ANode | None) -> Company:
    """The company the node serves, or a 503 refusal that says why it cannot answer."""
    if node is None:
        raise A2ARefused(503, "this process runs no node; start one with `manage.py crewlet_node`")
    if node.company is None:
        raise A2ARefused(503, "no company revision is active on this node yet; import one with PUT /config")
    return node.company


async def get_channel(node: A2ANode | None, channel_id: str) -> dict[str, Any]:
    """One channel's record, open or closed; 404 naming the id when there is none."""
    serving(node)
    try:
        uuid.UUID(channel_id)
    except ValueError:
        raise A2ARefused(422, f"channel_id: {channel_id!r} is not a channel id (a UUID)") from None
    channel = await ChannelBook(node.coord).get(channel_id)
    if channel is None:
        raise A2ARefused(404, f"channel_id: no channel {channel_id}; a closed channel's record is kept seven days after it closed")
    return channel.describe()


async def list_channels(node: A2ANode | None, *, seat: str | None = None, state: str | None = None) -> dict[str, Any]:
    """The channels a seat is a party to (either side), newest first; `state` open or closed."""
    company = serving(node)
    if state is not None and state not in STATES:
        raise A2ARefused(422, f"state: {state!r} is not one of {', '.join(STATES)}")
    if seat is not None and company.seat_by_handle(seat) is None:
        raise A2ARefused(404, f"seat: {seat!r} is no seat of the company")
    items = [c for c in await ChannelBook(node.coord).all()
             if (seat is None or seat in (c.requester, c.responder)) and (state is None or c.state == state)]
    items.sort(key=lambda c: c.opened_at, reverse=True)
    return {"node": node.node_id, "items": [c.describe() for c in items]}


async def operator_ask(node: A2ANode | None, *, asker: str, target: str, brief: str) -> AskOutcome:
    """Ask as `asker` would with its a2a_ask tool, at depth 0, in a new trace: the operator's
    path (`POST /a2a/ask`, `manage.py crewlet_a2a ask`) into the same `a2a.service.ask`."""
    serving(node)
    if not asker:
        raise A2ARefused(422, "asker: name the agent seat the ask is made as")
    return await ask(node, asker=asker, target=target, brief=brief, depth=0, trace=trace_of())
