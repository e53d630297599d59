"""The event log's horizon (seed 002, "the event log's 30-day read floor"; seed 000, "Every
question is asked at one instant": "every node floors the 30-day history at that instant").

History is `stream.event_retention_hours` deep (720 hours, 30 days, by default): every read
floors at the asker's instant less that (`floor_at`), and `prune` deletes what lies past it,
so the store holds no more than a read can reach. Rows and their party rows go together, a
few thousand to a transaction so the store writer never waits long behind the sweep.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from events.store import db_time

# Seed 002: 30 days, `stream.event_retention_hours` (the node passes its own value; this is
# the default a process without a node reads with).
HISTORY_HOURS = 720
# A few thousand rows a transaction: the sweep of a day's backlog is many short transactions,
# each well under the store writer's batch, so a turn's events never wait behind it.
PRUNE_CHUNK = 5_000


def floor_at(instant: datetime, horizon_hours: float) -> datetime:
    """The oldest moment a read at `instant` reaches."""
    return instant - timedelta(hours=horizon_hours)


def prune(before: datetime, *, using: str = DEFAULT_DB_ALIAS, chunk: int = PRUNE_CHUNK) -> int:
    """Delete every row older than `before` and its party rows; how many rows went."""
    cutoff = db_time(before)
    total = 0
    while True:
        with transaction.atomic(using=using):
            with connections[using].cursor() as cursor:
                cursor.execute("SELECT event_time FROM crewlet_events WHERE event_time < %s "
                               "ORDER BY event_time LIMIT 1 OFFSET %s", [cutoff, chunk - 1])
                found = cursor.fetchone()
                # Up to and including the chunk's last moment, or everything below the cutoff.
                upto, op = (_text(found[0]), "<=") if found else (cutoff, "<")
                cursor.execute(f"DELETE FROM crewlet_event_parties WHERE event_time {op} %s", [upto])
                cursor.execute(f"DELETE FROM crewlet_events WHERE event_time {op} %s", [upto])
                total += cursor.rowcount
        if found is None:
            return total


def _text(value) -> str:
    return value if isinstance(value, str) else db_time(value)
