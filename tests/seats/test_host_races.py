"""A delivery that races a pause (seed 000, "Busy agents queue; held agents wait on the broker": a
held seat receives nothing, and its mail waits with its order intact; seats/host.py: "a delivery
that reaches a held seat anyway (it raced the hold) takes the hold again and is deferred,
keeping its place at the head").

Each race is built in order, not in time: the pause lands while the delivery is already in
hand -- drained beside a conversation whose turn is running (the queue hands the rest of the
drain back between partitions), or inside the host's handler, past its first look at the
holds and waiting for the node's concurrency slot (the host defers it there) -- and only then
is the delivery let go on. Both queue backends.
"""
from __future__ import annotations

import asyncio

import pytest

from engine.queue import topics
from seats.holds import HOLD_NO_PROVIDER, HOLD_PAUSED
from seats.pauses import pause_seat, resume_seat
from tests.queue.waiting import eventually, throughout
from tests.seats.hosting import backend, company, first_of_two_conversations_running, mail, make_rig  # noqa: F401  (fixtures)

pytestmark = pytest.mark.timeout(60)


class WatchedGate(asyncio.Semaphore):
    """The node's concurrency gate, saying how many deliveries wait at it for a slot."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.waiting = 0

    async def acquire(self) -> bool:
        self.waiting += 1
        try:
            return await super().acquire()
        finally:
            self.waiting -= 1


async def _pause(rig, handle: str = "alice") -> None:
    await pause_seat(rig.runtime.pauses, rig.runtime.publish, rig.node.company, handle,
                     reason="looking into it", stop_running=False, paused_by="admin")
    await eventually(lambda: rig.host(handle).pause is not None, message=f"{handle}'s host to learn of the pause")


async def _resume(rig, handle: str = "alice") -> None:
    await resume_seat(rig.runtime.pauses, rig.runtime.publish, rig.node.company, handle, resumed_by="admin")


async def test_a_conversation_drained_before_the_pause_landed_is_deferred_and_runs_first_after_the_resume(backend):
    rig = await make_rig(backend)
    try:
        gate = await first_of_two_conversations_running(rig)
        # The second conversation is drained and waits behind the running turn; the pause lands now.
        await _pause(rig)
        gate.set()
        await eventually(lambda: rig.turns.outcomes == ["completed"], message="the running turn to finish")
        await eventually(lambda: HOLD_PAUSED in rig.host().holds, message="the paused hold")
        await throughout(lambda: len(rig.turns.requests) == 1, window=0.5,
                         message="a turn ran on a paused seat for mail drained before the pause")
        assert await rig.pending() == 1  # deferred, not lost
        await rig.publish(mail("third", key="slack:C3:1", at=2))  # newer mail, while paused
        await _resume(rig)
        await eventually(lambda: len(rig.turns.outcomes) == 3, message="the held mail to run after the resume")
        # The deferred conversation kept its place: it runs before mail that came after it.
        assert rig.turns.turns_of() == [["first"], ["second"], ["third"]]
        second = rig.turns.requests[1].trigger
        assert second.get("body") == "second"
        await eventually(lambda: _count(rig.pending(), 0), message="every message acked")
    finally:
        await rig.runtime.stop(cut=True)


async def test_a_delivery_waiting_for_a_slot_when_the_pause_lands_runs_no_turn(backend):
    rig = await make_rig(backend, max_concurrent=1)
    try:
        gate = await _alice_waits_for_bobs_slot(rig)
        await _pause(rig)  # ... when the pause lands
        gate.set()
        await eventually(lambda: rig.turns.outcomes == ["completed"], message="bob's turn to finish")
        await eventually(lambda: HOLD_PAUSED in rig.host().holds, message="alice's paused hold")
        await throughout(lambda: rig.turns.turns_of("alice") == [], window=0.5, message="a turn ran on a paused seat")
        assert await rig.pending() == 1
        await _resume(rig)
        await eventually(lambda: rig.turns.turns_of("alice") == [["alice's"]], message="alice's mail after the resume")
        await eventually(lambda: _count(rig.pending(), 0), message="alice's mail acked")
    finally:
        await rig.runtime.stop(cut=True)


async def test_a_delivery_waiting_for_a_slot_when_a_revision_drops_the_providers_runs_no_turn(backend):
    rig = await make_rig(backend, max_concurrent=1)
    try:
        gate = await _alice_waits_for_bobs_slot(rig)
        await rig.node.apply(company(providers=False))  # the revision lands while it waits
        gate.set()
        await eventually(lambda: rig.turns.outcomes[:1] == ["completed"], message="bob's turn to finish")
        await throughout(lambda: rig.turns.turns_of("alice") == [], window=0.5, message="a turn ran with no provider")
        assert HOLD_NO_PROVIDER in rig.host().holds and rig.host().state == "held"
        assert await rig.pending() == 1
        await rig.node.apply(company(providers=True))
        await eventually(lambda: rig.turns.turns_of("alice") == [["alice's"]], message="alice's mail once a provider is back")
        await eventually(lambda: _count(rig.pending(), 0), message="alice's mail acked")
    finally:
        await rig.runtime.stop(cut=True)


async def _alice_waits_for_bobs_slot(rig):
    """Bob's turn holds the node's only slot (its gate, returned, still closed) while alice's
    delivery has passed the host's first look at its holds and waits for the slot."""
    watched = rig.runtime.gate = WatchedGate(1)
    gate = rig.turns.hold()
    await rig.runtime.on_seat_acquired("bob", None)
    await rig.runtime.on_seat_acquired("alice", None)
    await rig.publish(mail("bob's", handle="bob"), handle="bob")
    await eventually(lambda: rig.turns.running == 1, message="bob's turn to take the only slot")
    await rig.publish(mail("alice's"))
    await eventually(lambda: watched.waiting == 1, message="alice's delivery to wait for the slot")
    return gate


async def _count(awaitable, n: int) -> bool:
    return await awaitable == n


async def test_a_seat_taken_again_while_its_last_host_is_still_letting_go_is_hosted_and_works_its_mail(backend):
    # A node whose lease lapsed (a stall, a store election) takes the seat again at its next
    # sweep, while the host it had is still detaching: the lost lease and the new acquisition
    # reach the runtime together. The new host attaches once the old one has let go, so the
    # seat is hosted and its mail is worked, not held by a node with no host attached.
    rig = await make_rig(backend)
    try:
        await rig.runtime.on_seat_acquired("alice", None)
        first = rig.host()
        await asyncio.gather(rig.runtime.on_seat_released("alice", None, "lease lost"),
                             rig.runtime.on_seat_acquired("alice", None))
        assert rig.host() is not first and first.stopping
        await rig.publish(mail("after the handover"))
        await eventually(lambda: rig.turns.outcomes == ["completed"], message="the mail to be worked by the new host")
        assert rig.turns.turns_of() == [["after the handover"]]
    finally:
        await rig.runtime.stop(cut=True)


async def test_a_host_that_could_not_attach_is_started_again_while_the_seat_is_held(backend):
    # The seat's control mailbox is still attached here when the lease is taken (as a host
    # that has not yet let go would hold it): the first start is refused by the queue. The node
    # still holds the lease, so the runtime starts the host again once the mailbox is free,
    # rather than holding a seat that nobody works.
    rig = await make_rig(backend)
    control, group = topics.agent_control("alice"), topics.control_group("alice")

    async def elsewhere(event) -> None:
        return None

    try:
        await rig.queue.subscribe(control, group, elsewhere)
        lease = await rig.node.leases.acquire("seat:alice")
        await rig.runtime.on_seat_acquired("alice", lease)
        assert "alice" not in rig.runtime.hosts and "alice" in rig.runtime._admitting
        await rig.queue.detach(control, group)
        await rig.publish(mail("once attached"))
        await eventually(lambda: rig.turns.outcomes == ["completed"], timeout=20,
                         message="the host to be started again and work the mail")
    finally:
        await rig.runtime.stop(cut=True)
