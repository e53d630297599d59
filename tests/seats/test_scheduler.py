"""The scheduler duty fires each schedule once per due time, on the company's clock (seed 000,
"Routing", producer 2; seed 002, the `workers` role's scheduler tick), on both queue backends
and the coordination twin, with a stepped clock: exactly once across a handover and a holder
that died between its claim and its publish, one fire with the count after downtime, daylight
saving on the company's clock, and a revision applied without a restart."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from engine.config.company import parse_company
from engine.coord.leases import LeaseManager, duty_key
from engine.coord.local import LocalCoord
from engine.queue import topics
from seats import queries
from seats.errors import SeatRefused
from seats.scheduler import SchedulerDuty
from seats.schedules import PUBLISHING, FireBook, FireRecord, definition_of, fire_ids, publish_fire
from tests.queue.waiting import eventually
from tests.seats.hosting import FakeNode, Published, backend  # noqa: F401  (fixtures)

pytestmark = pytest.mark.timeout(60)

UTC = timezone.utc
START = datetime(2025, 6, 2, 8, 0, tzinfo=UTC)  # a Monday, 08:00 UTC
STANDUP = {"name": "standup", "seat": "carol", "cron": "0 9 * * 1-5", "task": "Post the standup"}


def company(schedules=(STANDUP,), tz: str = "UTC"):
    doc = {"name": "nimbus", "timezone": tz, "providers": {"llm": [{"name": "local", "kind": "scripted"}]},
           "org": {"seats": [{"handle": "maya", "kind": "human"}, {"handle": "alice", "kind": "agent"},
                             {"handle": "carol", "kind": "agent"}]},
           "schedules": list(schedules)}
    return parse_company(yaml.safe_dump(doc), env={})


class Clock:
    def __init__(self, at: datetime = START) -> None:
        self.now = at.timestamp()

    def __call__(self) -> float:
        return self.now

    def step(self, **delta) -> None:
        self.now += timedelta(**delta).total_seconds()

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(self.now, UTC)


async def _node(backend, clock, coord=None, node_id="node-w", the_company=None) -> FakeNode:
    coord = coord or LocalCoord(clock=clock)
    node = FakeNode(queue=await backend.client(node_id), coord=coord, company=the_company or company(), node_id=node_id)
    node.leases = LeaseManager(coord, node_id, ttl=30, clock=clock)
    await node.ensure_mailboxes()
    return node


async def _tick(duty: SchedulerDuty):
    """One tick as the loop runs it: hold the duty (re-taking it after a stepped clock), then tick."""
    assert await duty.duty.hold()
    return await duty.tick_once()


async def _tasks(queue, handle="carol") -> list:
    """Every task the seat's inbox holds, read and acknowledged."""
    pending = await queue.pending(topics.agent_inbox(handle), topics.inbox_group(handle))
    seen = []

    async def take(delivery):
        seen.append(delivery.event)

    await queue.subscribe(topics.agent_inbox(handle), topics.inbox_group(handle), take)
    await eventually(lambda: len(seen) >= pending, message=f"{pending} tasks read")
    await queue.detach(topics.agent_inbox(handle), topics.inbox_group(handle))
    return seen


async def test_a_schedule_fires_once_per_due_time_with_the_task_for_its_seat(backend):
    clock = Clock()
    node = await _node(backend, clock)
    published = Published(node.queue)
    duty = SchedulerDuty(node, clock=clock)
    try:
        assert await _tick(duty) == []  # first sight: counting starts now, nothing owed before it
        clock.step(minutes=59)
        assert await _tick(duty) == []
        clock.step(minutes=1)
        fired = await _tick(duty)
        assert [(f.schedule, f.due, f.missed) for f in fired] == [("standup", datetime(2025, 6, 2, 9, tzinfo=UTC), 0)]
        assert await _tick(duty) == []  # the same due time again: nothing
        clock.step(seconds=30)
        assert await _tick(duty) == []
        [task] = await _tasks(node.queue)
        assert task.type == "task_assigned" and task.get("schedule") == "standup" and task.get("agent_handle") == "carol"
        assert task.get("task") == "Post the standup" and task.get("scheduled_for") == datetime(2025, 6, 2, 9, tzinfo=UTC)
        assert task.source == "scheduler" and task.get("assigned_by") == "schedule:standup"
        await eventually(lambda: published.of("scheduled_task_fired"), message="the fire recorded")
        [record] = published.of("scheduled_task_fired")
        assert record.get("missed") == 0 and record.get("task_id") == task.get("task_id") and record.trace_id == task.trace_id
    finally:
        await duty.stop(cut=False)


async def test_after_downtime_a_schedule_fires_once_with_the_number_it_missed(backend):
    clock = Clock()
    node = await _node(backend, clock)
    published = Published(node.queue)
    duty = SchedulerDuty(node, clock=clock)
    try:
        await _tick(duty)
        clock.step(days=4, hours=2)  # Monday 08:00 -> Friday 10:00: Mon, Tue, Wed, Thu, Fri 09:00 passed
        [fired] = await _tick(duty)
        assert fired.due == datetime(2025, 6, 6, 9, tzinfo=UTC) and fired.missed == 4
        assert len(await _tasks(node.queue)) == 1  # never one task per missed time
        await eventually(lambda: published.of("scheduled_task_fired"), message="the fire recorded")
        assert published.of("scheduled_task_fired")[0].get("missed") == 4
        assert "4 missed fires" in published.of("scheduled_task_fired")[0].summary()
    finally:
        await duty.stop(cut=False)


async def test_a_handover_fires_each_due_time_exactly_once(backend):
    clock = Clock()
    first = await _node(backend, clock)
    second = await _node(backend, clock, coord=first.coord, node_id="node-x")
    one, two = SchedulerDuty(first, clock=clock), SchedulerDuty(second, clock=clock)
    try:
        await _tick(one)
        assert not await two.duty.hold()  # one holder fleet-wide
        clock.step(hours=1)
        assert len(await _tick(one)) == 1
        # the holder dies (its lease lapses); the peer takes the duty with a larger epoch
        clock.step(seconds=61)
        assert await two.duty.hold() and two.duty.epoch > one.duty.lease.epoch
        assert await two.tick_once() == []  # Monday 09:00 is recorded fired: not again
        clock.step(days=1)
        assert [f.due for f in await _tick(two)] == [datetime(2025, 6, 3, 9, tzinfo=UTC)]
        # the old holder, still believing, is fenced by the record's larger epoch
        one.duty.lease.last_renewed = clock()  # as if its keeper had just renewed
        assert await one.tick_once() == [] and one.duty.lease is None
        assert len(await _tasks(first.queue)) == 2
    finally:
        await one.stop(cut=True)
        await two.stop(cut=False)


async def test_a_claim_left_unpublished_by_a_dead_holder_is_published_once_by_the_next(backend):
    clock = Clock(START + timedelta(hours=1, seconds=5))
    node = await _node(backend, clock)
    the_company, due = node.company, datetime(2025, 6, 2, 9, tzinfo=UTC)
    ids = fire_ids("nimbus", "standup", due)
    book = FireBook(node.coord)
    # What a holder that died between its claim and its mark leaves: the claim, and maybe the task
    claim = FireRecord(state=PUBLISHING, due=due, definition=definition_of(the_company.schedules[0], the_company),
                       epoch=1, node="node-dead", seat="carol", task="Post the standup", **ids)
    await book.write("standup", None, claim)
    await publish_fire(node.queue, the_company, schedule="standup", seat="carol", task="Post the standup",
                       cron="0 9 * * 1-5", due=due, ids=ids)
    duty = SchedulerDuty(node, clock=clock)
    try:
        [fired] = await _tick(duty)
        assert fired.again and fired.due == due and fired.task_event_id == ids["task_event_id"]
        _, record = await book.read("standup")
        assert record.state == "published"
        tasks = await _tasks(node.queue)
        assert [str(t.id) for t in tasks] == [ids["task_event_id"]]  # the broker kept one
    finally:
        await duty.stop(cut=False)


async def test_the_company_clock_and_daylight_saving_decide_when_a_schedule_fires(backend):
    clock = Clock(datetime(2025, 3, 29, 12, tzinfo=UTC))
    nightly = {"name": "nightly", "seat": "alice", "cron": "30 2 * * *", "task": "Rotate the logs"}
    node = await _node(backend, clock, the_company=company([nightly], tz="Europe/Berlin"))
    duty = SchedulerDuty(node, clock=clock)
    try:
        await _tick(duty)
        clock.now = datetime(2025, 3, 30, 0, 59, tzinfo=UTC).timestamp()  # 01:59 CET
        assert await _tick(duty) == []
        clock.now = datetime(2025, 3, 30, 1, 0, tzinfo=UTC).timestamp()  # 02:00 CET is 03:00 CEST: 02:30 never happens
        assert [f.due for f in await _tick(duty)] == [datetime(2025, 3, 30, 1, 0, tzinfo=UTC)]
        clock.step(hours=23, minutes=30)
        assert [f.due for f in await _tick(duty)] == [datetime(2025, 3, 31, 0, 30, tzinfo=UTC)]  # 02:30 CEST
    finally:
        await duty.stop(cut=False)


async def test_a_revision_that_adds_changes_or_removes_a_schedule_applies_without_a_restart(backend):
    clock = Clock()
    node = await _node(backend, clock, the_company=company([]))
    duty = SchedulerDuty(node, clock=clock)
    book = FireBook(node.coord)
    try:
        assert await _tick(duty) == []
        node.company = company([STANDUP])
        await duty.on_company(node.company)
        assert await _tick(duty) == []  # added: counted from now
        clock.step(hours=1)
        assert len(await _tick(duty)) == 1
        # the cron changes: counted again from now, with no catch-up under the new cron
        changed = dict(STANDUP, cron="0 8 * * 1-5")
        node.company = company([changed])
        await duty.on_company(node.company)
        assert await _tick(duty) == []
        clock.step(days=1)  # Tuesday 09:00 (08:00 passed under the new cron)
        assert [f.due for f in await _tick(duty)] == [datetime(2025, 6, 3, 8, tzinfo=UTC)]
        node.company = company([])
        await duty.on_company(node.company)
        await _tick(duty)
        assert (await book.read("standup"))[1] is None  # removed: its record goes with it
    finally:
        await duty.stop(cut=False)


async def test_an_operator_fire_goes_the_same_path_and_moves_no_due_time(backend):
    clock = Clock()
    node = await _node(backend, clock)
    published = Published(node.queue)
    duty = SchedulerDuty(node, clock=clock)
    try:
        await _tick(duty)
        done = await queries.fire_schedule(node, "standup", actor="token:founder")
        [task] = await _tasks(node.queue)
        assert str(task.id) == done["event_id"] and task.get("schedule") == "standup"
        await eventually(lambda: published.of("scheduled_task_fired"), message="the manual fire recorded")
        record = published.of("scheduled_task_fired")[0]
        assert record.get("manual") is True and record.get("fired_by") == "token:founder"
        clock.step(hours=1)
        assert len(await _tick(duty)) == 1  # Monday 09:00 still fires
        with pytest.raises(SeatRefused) as refused:
            await queries.fire_schedule(node, "stand-up", actor="token:founder")
        assert refused.value.status == 404 and "'stand-up'" in refused.value.detail and "standup" in refused.value.detail
    finally:
        await duty.stop(cut=False)


async def test_get_schedules_shows_next_fires_last_fire_and_the_holder(backend):
    clock = Clock()
    node = await _node(backend, clock)
    duty = SchedulerDuty(node, clock=clock)
    try:
        await _tick(duty)
        clock.step(hours=1)
        await _tick(duty)
        answer = await queries.schedules(node)
        [item] = answer["items"]
        assert item["name"] == "standup" and item["seat"] == "carol" and len(item["next_fires"]) == 3
        assert item["last_fire"]["due"] == "2025-06-02T09:00:00+00:00" and item["last_fire"]["state"] == "published"
        assert item["holder"]["node"] == "node-w" and item["holder"]["epoch"] == duty.duty.epoch
        assert (await node.leases.holder(duty_key("scheduler"))).holder == "node-w"
    finally:
        await duty.stop(cut=False)


def test_fire_ids_are_the_same_for_one_due_time_and_differ_for_the_next():
    due = datetime(2025, 6, 2, 9, tzinfo=UTC)
    assert fire_ids("nimbus", "standup", due) == fire_ids("nimbus", "standup", due.astimezone(timezone(timedelta(hours=2))))
    assert fire_ids("nimbus", "standup", due) != fire_ids("nimbus", "standup", due + timedelta(days=1))
    assert uuid.UUID(fire_ids("nimbus", "standup", due)["task_event_id"]).version == 5
