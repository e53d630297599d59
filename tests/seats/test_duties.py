"""The maintenance duty retires a removed seat's mailboxes (seed 000, "A removed seat's
subscriptions are retired, not kept"), on both queue backends, with a stepped clock."""
from __future__ import annotations

import pytest

from engine.coord.leases import LeaseManager, duty_key
from engine.coord.local import LocalCoord
from engine.queue import topics
from seats.duties import MaintenanceDuty
from tests.seats.hosting import FakeNode, backend, company, mail  # noqa: F401  (fixtures)

pytestmark = pytest.mark.timeout(60)

DAY = 24 * 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


async def _node(backend, clock, agents=("alice", "bob")) -> FakeNode:
    coord = LocalCoord(clock=clock)
    node = FakeNode(queue=await backend.client("node-w"), coord=coord, company=company(agents=agents))
    node.leases = LeaseManager(coord, "node-w", ttl=30, clock=clock)
    await node.ensure_mailboxes()
    return node


async def _mailboxes(queue) -> set[str]:
    return {topics.handle_of(t) for kind in ("inbox", "control")
            for t, _ in await queue.list_subscriptions(topics.agent_pattern(kind))}


async def test_a_seat_absent_for_the_horizon_loses_its_mailboxes_and_their_mail(backend):
    clock = Clock()
    node = await _node(backend, clock)
    duty = MaintenanceDuty(node, clock=clock)  # the product's timings: a sweep a minute, retired a day after
    assert (duty.sweep_seconds, duty.retire_after) == (60, DAY)
    assert await duty.hold_duty()
    assert await duty.sweep_once() == []
    await node.queue.publish(topics.agent_inbox("bob"), mail("never read", handle="bob"))
    node.company = company(agents=("alice",))  # a revision removed bob
    clock.now += 60
    assert await duty.sweep_once() == []  # the next sweep finds bob absent: his clock starts
    clock.now += DAY / 2
    assert await duty.sweep_once() == []  # half a day absent: kept
    assert await _mailboxes(node.queue) == {"alice", "bob"}
    clock.now += DAY / 2
    assert await duty.sweep_once() == ["bob"]
    assert await _mailboxes(node.queue) == {"alice"}


async def test_a_seat_that_comes_back_before_the_horizon_keeps_its_mailbox(backend):
    clock = Clock()
    node = await _node(backend, clock)
    duty = MaintenanceDuty(node, sweep_seconds=1, retire_after_seconds=DAY, clock=clock)
    await duty.sweep_once()
    node.company = company(agents=("alice",))
    clock.now += DAY - 10
    await duty.sweep_once()
    node.company = company(agents=("alice", "bob"))
    await duty.sweep_once()
    clock.now += DAY
    assert await duty.sweep_once() == []
    assert await _mailboxes(node.queue) == {"alice", "bob"}


async def test_a_mailbox_nobody_remembers_is_found_on_the_broker_and_retired_too(backend):
    clock = Clock()
    node = await _node(backend, clock)
    await node.queue.ensure_subscription(topics.agent_inbox("zed"), topics.inbox_group("zed"))
    duty = MaintenanceDuty(node, sweep_seconds=1, retire_after_seconds=DAY, clock=clock)
    assert await duty.sweep_once() == []  # found: its clock starts now
    clock.now += DAY + 1
    assert await duty.sweep_once() == ["zed"]
    assert await _mailboxes(node.queue) == {"alice", "bob"}


async def test_only_one_node_runs_the_duty(backend):
    clock = Clock()
    node = await _node(backend, clock)
    other = FakeNode(queue=await backend.client("node-x"), coord=node.coord, company=node.company, node_id="node-x")
    other.leases = LeaseManager(node.coord, "node-x", ttl=30, clock=clock)
    first = MaintenanceDuty(node, sweep_seconds=1, retire_after_seconds=DAY, clock=clock)
    second = MaintenanceDuty(other, sweep_seconds=1, retire_after_seconds=DAY, clock=clock)
    try:
        assert await first.hold_duty() and not await second.hold_duty()
        assert (await node.leases.holder(duty_key("maintenance"))).holder == "node-w"
    finally:
        await first.stop(cut=False)
        await second.stop(cut=False)
    assert await second.hold_duty()
    await second.stop(cut=False)


async def test_a_steady_company_costs_no_write_per_sweep(backend):
    from seats.duties import seen_key
    from seats.pauses import SEATS_BUCKET

    clock = Clock()
    node = await _node(backend, clock)
    duty = MaintenanceDuty(node, sweep_seconds=1, retire_after_seconds=DAY, clock=clock)
    await duty.sweep_once()
    recorded = {h: (await node.coord.get(SEATS_BUCKET, seen_key(h))).revision for h in ("alice", "bob")}
    for _ in range(3):
        clock.now += 60
        await duty.sweep_once()
    assert {h: (await node.coord.get(SEATS_BUCKET, seen_key(h))).revision for h in ("alice", "bob")} == recorded


async def test_the_retirement_clock_is_the_store_s_so_a_new_holder_keeps_it(backend):
    clock = Clock()
    node = await _node(backend, clock)
    first = MaintenanceDuty(node, sweep_seconds=1, retire_after_seconds=DAY, clock=clock)
    await first.sweep_once()
    node.company = company(agents=("alice",))
    clock.now += 60
    await first.sweep_once()  # bob's clock starts
    clock.now += DAY + 1
    restarted = MaintenanceDuty(node, sweep_seconds=1, retire_after_seconds=DAY, clock=clock)  # a node restarted
    assert await restarted.sweep_once() == ["bob"]


async def test_a_reverted_company_of_many_seats_is_cleared_in_one_sweep(backend):
    clock = Clock()
    many = tuple(f"a{i:03d}" for i in range(150))
    node = await _node(backend, clock, agents=("alice",) + many)
    duty = MaintenanceDuty(node, sweep_seconds=1, retire_after_seconds=DAY, clock=clock)
    await duty.sweep_once()
    node.company = company(agents=("alice",))  # the revert
    clock.now += 60
    assert await duty.sweep_once() == []
    clock.now += DAY
    assert await duty.sweep_once() == sorted(many)
    assert await _mailboxes(node.queue) == {"alice"}
    assert await duty.sweep_once() == []
