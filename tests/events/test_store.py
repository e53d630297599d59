"""The event-store writer: what it writes, what it leaves out, and that it never fails a publish."""
from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection

from events import categories
from events.envelope import Event, utcnow
from events.models import EventParty, StoredEvent
from events.store import EventStoreWriter, db_time, parties_of, write_events
from tests.events.factories import make_event

pytestmark = pytest.mark.timeout(60)


class BrokenSummary(Event):
    """An event whose summary raises: a bug in one type must not cost its batch."""

    def summary(self) -> str:
        raise RuntimeError("summary exploded")


@pytest.fixture
def writer():
    made: list[EventStoreWriter] = []

    def build(**kwargs) -> EventStoreWriter:
        w = EventStoreWriter(**kwargs)
        made.append(w)
        return w

    yield build
    for w in made:
        w.close(timeout=30)


def _lock_the_store():
    """A second connection holding the write lock, as a long transaction elsewhere would."""
    holder = sqlite3.connect(connection.settings_dict["NAME"], timeout=5, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


# -- the file ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_store_is_a_real_file_in_wal_mode():
    name = connection.settings_dict["NAME"]
    assert name and ":memory:" not in name and "mode=memory" not in name
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0].lower() == "wal"
        cursor.execute("PRAGMA busy_timeout")
        assert cursor.fetchone()[0] >= 5000
    # WAL is a property of the file itself, so a plain client opening it sees it too.
    plain = sqlite3.connect(name)
    try:
        assert plain.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
    finally:
        plain.close()


@pytest.mark.parametrize(
    "when",
    [
        datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone.utc),
        datetime(2025, 3, 1, 12, 0, 0, 7, tzinfo=timezone.utc),
        datetime(2025, 3, 1, 14, 30, 0, 123456, tzinfo=timezone(timedelta(hours=2))),
    ],
)
def test_stored_times_are_spelled_the_way_django_spells_them(when):
    assert db_time(when) == connection.ops.adapt_datetimefield_value(when)


# -- what is written --------------------------------------------------------------------


@pytest.mark.django_db
def test_a_second_write_of_one_event_changes_nothing_and_raises_nothing():
    event = make_event("task_assigned", agent_id="agent-1", task="ship it", participants=["agent-2"])
    assert write_events([event]) == 1
    before = list(StoredEvent.objects.values())
    parties_before = sorted(EventParty.objects.values_list("agent_id", flat=True))

    write_events([event])
    write_events([event, event])

    assert list(StoredEvent.objects.values()) == before
    assert sorted(EventParty.objects.values_list("agent_id", flat=True)) == parties_before


@pytest.mark.django_db
def test_a_row_carries_the_wire_form_and_the_promoted_columns():
    event = make_event(
        "task_assigned",
        agent_id="agent-7",
        agent_handle="ada",
        agent_role="engineer",
        task="review the release notes",
        assigned_by="ops",
        task_id="T-9",
        payload={"channel_id": "C1", "sender": "grace", "partition_key": "pk-1", "conversation_key": "conv-1"},
    )
    write_events([event])
    row = StoredEvent.objects.get()
    assert row.event_id == event.id
    assert row.event_time == event.timestamp
    assert row.event_type == categories.row_label(event) == "task_assigned"
    assert row.category == categories.category_of("task_assigned") == "task"
    assert (row.agent_id, row.agent_role, row.task_id, row.channel_id, row.sender) == ("agent-7", "engineer", "T-9", "C1", "grace")
    assert (row.conversation_key, row.partition_key) == ("conv-1", "pk-1")
    assert (row.trace_id, row.span_id, row.node) == (event.trace_id, event.span_id, "node-a")
    assert row.summary == event.summary()
    assert row.feed is True
    assert row.payload == event.to_wire()
    assert Event.from_wire(row.payload).to_wire() == event.to_wire()


def test_parties_are_every_agent_the_event_names_once():
    event = make_event(
        "task_assigned",
        agent_id="a1",
        agent_handle="ada",
        agent_ids=["a2", "a1"],
        participants=[{"agent_id": "a3"}, "a4"],
        to_agent_id="a5",
        from_agent_id="a2",
    )
    assert parties_of(event) == ["a1", "a2", "a3", "a4", "a5", "ada"]


@pytest.mark.django_db
def test_an_inbound_delivery_is_filed_under_its_own_label():
    delivery = make_event(
        "inbound_delivery", agent_id="a1", transport="webhook", event_kind="issue_comment", raw_body='{"action":"created"}'
    )
    write_events([delivery])
    row = StoredEvent.objects.get()
    assert (row.event_type, row.category) == ("webhook:issue_comment", "webhook")
    assert row.payload["type"] == "inbound_delivery" and row.payload["raw_body"] == '{"action":"created"}'


@pytest.mark.django_db
def test_an_excluded_type_is_not_written():
    assert not categories.is_stored("agent_spawned")
    assert write_events([make_event("agent_spawned", agent_id="a1")]) == 0
    assert not StoredEvent.objects.exists()
    assert not EventParty.objects.exists()


@pytest.mark.django_db
def test_the_stored_not_fed_type_is_stored_with_feed_off():
    assert categories.is_stored("auxiliary_spend") and not categories.is_fed("auxiliary_spend")
    write_events([make_event("auxiliary_spend", agent_id="a1"), make_event("agent_turn_completed", agent_id="a1")])
    rows = dict(StoredEvent.objects.values_list("event_type", "feed"))
    assert rows == {"auxiliary_spend": False, "agent_turn_completed": True}
    assert StoredEvent.objects.get(event_type="auxiliary_spend").category == "system"


# -- the listener -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_listener_writes_each_categorised_event_once(writer):
    w = writer()
    stored = [make_event("task_assigned", agent_id="a1"), make_event("external_notification", agent_id="a1")]
    for event in stored:
        w("crewlet.events.test", event)
    w("crewlet.events.test", stored[0])  # the same event again (a relayed copy)
    w("crewlet.events.test", make_event("agent_spawned", agent_id="a1"))
    assert w.flush(timeout=10)

    assert sorted(StoredEvent.objects.values_list("event_type", flat=True)) == ["external_notification", "task_assigned"]
    stats = w.stats
    assert stats.excluded == 1 and stats.queued == 3 and stats.written == 3 and stats.failed == 0


@pytest.mark.django_db(transaction=True)
def test_a_listener_error_never_raises_into_the_publisher(writer):
    w = writer()
    w("crewlet.events.test", None)  # not an event at all
    w("crewlet.events.test", object())
    good = make_event("task_assigned", agent_id="a1")
    broken = BrokenSummary(type="task_assigned", id=uuid.uuid4(), timestamp=utcnow())
    w("crewlet.events.test", broken)
    w("crewlet.events.test", good)
    assert w.flush(timeout=10)

    assert w.stats.failed == 3
    # The broken row cost nobody else their place in the batch.
    assert list(StoredEvent.objects.values_list("event_id", flat=True)) == [good.id]


@pytest.mark.django_db(transaction=True)
def test_a_full_queue_is_counted_and_never_blocks_the_publisher(writer):
    w = writer(queue_size=2, batch_size=1)
    holder = _lock_the_store()
    try:
        events = [make_event("task_assigned", agent_id="a1") for _ in range(10)]
        for event in events:
            started = time.monotonic()
            w("crewlet.events.test", event)
            assert time.monotonic() - started < 0.5
        # The thread holds at most one batch (one event) while it waits on the lock, and the
        # queue two more: everything past that is dropped and counted.
        stats = w.stats
        assert stats.dropped >= 7
        assert stats.queued + stats.dropped == 10
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert w.flush(timeout=20)
    assert StoredEvent.objects.count() == w.stats.queued == w.stats.written


@pytest.mark.django_db(transaction=True)
def test_flush_waits_for_what_was_queued_before_it(writer):
    w = writer()
    holder = _lock_the_store()
    w("crewlet.events.test", make_event("task_assigned"))
    assert w.flush(timeout=0.3) is False  # the lock is held: not written yet, and flush says so
    holder.execute("ROLLBACK")
    holder.close()
    assert w.flush(timeout=20) is True
    assert StoredEvent.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_shutdown_flushes_everything_handed_over(writer):
    w = writer(batch_size=100)
    events = [make_event("task_assigned" if i % 2 else "external_notification", agent_id=f"a{i % 5}") for i in range(2_500)]
    publishers = [threading.Thread(target=lambda chunk=events[i::4]: [w("t", e) for e in chunk]) for i in range(4)]
    for t in publishers:
        t.start()
    for t in publishers:
        t.join()
    assert w.close(timeout=30)

    assert StoredEvent.objects.count() == 2_500
    assert EventParty.objects.count() == 2_500
    # A publish after close is counted, not queued behind a thread that is gone.
    w("t", make_event("task_assigned"))
    assert w.stats.dropped == 1 and StoredEvent.objects.count() == 2_500
