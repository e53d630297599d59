"""The history's horizon (seed 002: the event log's 30-day read floor, `stream.event_retention_hours`
720 by default): a data node sweeps what lies past it, rows and party rows alike, and no read
reaches past it even before the sweep."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from django.db import connections

from engine.history.horizon import SWEEP_SECONDS, HorizonSweep
from engine.history.reads import StoreThreads
from engine.queue.topics import EVENT_RETENTION_HOURS_DEFAULT
from events import queries
from events.retention import HISTORY_HOURS, prune
from events.store import write_events
from tests.events.factories import make_event

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def counts() -> tuple[int, int]:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM crewlet_events")
        events = cursor.fetchone()[0]
        cursor.execute("SELECT COUNT(*) FROM crewlet_event_parties")
        return events, cursor.fetchone()[0]


def test_the_horizon_is_thirty_days_as_the_stream_keeps_events():
    assert HISTORY_HOURS == EVENT_RETENTION_HOURS_DEFAULT == 720
    assert SWEEP_SECONDS == 3600.0


async def test_the_sweep_deletes_rows_and_party_rows_past_the_horizon_and_nothing_inside_it():
    now = datetime.now(timezone.utc)
    old = [make_event("task_assigned", at=now - timedelta(days=31, minutes=i), agent_id="id-ada") for i in range(7)]
    young = [make_event("task_assigned", at=now - timedelta(days=29), agent_id="id-ada"),
             make_event("task_assigned", at=now - timedelta(minutes=1), agent_id="id-bob")]
    await asyncio.to_thread(write_events, [*old, *young])
    threads = StoreThreads(1, "horizon-test")
    try:
        sweep = HorizonSweep(horizon_hours=HISTORY_HOURS, run_write=threads)
        assert await sweep.sweep_once() == 7
        assert await asyncio.to_thread(counts) == (2, 2)
        assert await sweep.sweep_once() == 0
    finally:
        threads.close()


@pytest.mark.django_db(transaction=True)
def test_a_sweep_in_small_chunks_reaches_everything_past_the_horizon():
    now = datetime.now(timezone.utc)
    write_events([make_event("task_assigned", at=now - timedelta(days=40, seconds=i), agent_id="a") for i in range(23)])
    write_events([make_event("task_assigned", at=now, agent_id="a")])
    assert prune(now - timedelta(days=30), chunk=5) == 23
    assert counts() == (1, 1)


@pytest.mark.django_db(transaction=True)
def test_no_read_reaches_past_the_floor_before_the_sweep():
    now = datetime.now(timezone.utc)
    past = make_event("task_assigned", at=now - timedelta(days=31), trace_id="t" * 32)
    write_events([past])
    floor = now - timedelta(hours=HISTORY_HOURS)
    assert queries.events_page(floor=floor)["items"] == []
    assert queries.get_event(past.id, floor=floor) is None
    assert queries.trace("t" * 32, floor=floor) == []
    assert queries.get_event(past.id) is not None  # the floor is the reader's, the row still there
