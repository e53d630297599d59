"""The store's half of custody (seed 002, "Custody: the rows of a node without data").

A data node writes a custody batch's events as rows of its own event log, and records the
batch as unsettled in the same transaction (`write_batch`), so a crash can never leave rows
nobody knows came from a batch. Once the batch's keeper is decided in the coordination store
the record is settled: kept (`settle_kept`: the record goes, the rows stay), or lost to
another data node (`settle_lost`: the rows go with it).

While a batch is unsettled its rows sit on two data nodes for a moment, so they count in none
of this node's figures: `UNSETTLED_IDS` is what a count leaves out, `unsettled_turns` names
those rows instead, and `kept_ids` says which named rows this node keeps (seed 000, "Reading
the fleet's history": "each node counts the rows it keeps and names, by identity, the rows of
a batch it has written and not settled").

Plain blocking functions on the caller's thread and connection (`using`), as the writer's.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Iterable

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from events.envelope import Event
from events.store import INSERT_EVENT_SQL, INSERT_PARTY_SQL, db_time, rows_for

# The ids of every row an unsettled batch wrote: what a count leaves out.
UNSETTLED_IDS = "SELECT j.value FROM crewlet_custody_batches b, json_each(b.event_ids) j"
# SQLite's default bound on one statement's parameters is 32,766; a batch holds at most 256 events.
_CHUNK = 500


def write_batch(batch_id: str, source_node: str, events: Iterable[Event], *, using: str = DEFAULT_DB_ALIAS,
                now: datetime | None = None) -> list[str]:
    """Write the batch's events (a type this build does not place is left out, as the writer
    leaves it) and record the batch as unsettled, in one transaction; the hex ids written.
    A batch written before (a redelivery) is written again as it is: INSERT OR IGNORE."""
    rows, parties = [], []
    for event in events:
        built = rows_for(event)
        if built is not None:
            rows.append(built[0])
            parties.extend(built[1])
    ids = [row[0] for row in rows]
    written_at = db_time(now or datetime.now(timezone.utc))
    with transaction.atomic(using=using):
        with connections[using].cursor() as cursor:
            if rows:
                cursor.executemany(INSERT_EVENT_SQL, rows)
            if parties:
                cursor.executemany(INSERT_PARTY_SQL, parties)
            cursor.execute(
                "INSERT INTO crewlet_custody_batches (batch_id, source_node, event_ids, written_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (batch_id) DO NOTHING",
                [batch_id, source_node, json.dumps(ids), written_at],
            )
    return ids


def settle_kept(batch_id: str, *, using: str = DEFAULT_DB_ALIAS) -> None:
    """This node keeps the batch: its rows are its own from now on."""
    with connections[using].cursor() as cursor:
        cursor.execute("DELETE FROM crewlet_custody_batches WHERE batch_id = %s", [batch_id])


def settle_lost(batch_id: str, *, using: str = DEFAULT_DB_ALIAS) -> int:
    """Another data node keeps the batch: delete this node's copy of its rows and the record,
    in one transaction; how many rows went."""
    with transaction.atomic(using=using):
        with connections[using].cursor() as cursor:
            cursor.execute("SELECT event_ids FROM crewlet_custody_batches WHERE batch_id = %s", [batch_id])
            found = cursor.fetchone()
            if found is None:
                return 0
            ids = _ids(found[0])
            deleted = 0
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start:start + _CHUNK]
                marks = ", ".join(["%s"] * len(chunk))
                cursor.execute(
                    "DELETE FROM crewlet_event_parties WHERE (event_time, event_id) IN "
                    f"(SELECT event_time, event_id FROM crewlet_events WHERE event_id IN ({marks}))", chunk)
                cursor.execute(f"DELETE FROM crewlet_events WHERE event_id IN ({marks})", chunk)
                deleted += cursor.rowcount
            cursor.execute("DELETE FROM crewlet_custody_batches WHERE batch_id = %s", [batch_id])
    return deleted


def unsettled(*, using: str = DEFAULT_DB_ALIAS, written_before: datetime | None = None) -> list[str]:
    """The batch ids written here and not settled, oldest first (those written before a time, when given)."""
    sql = "SELECT batch_id FROM crewlet_custody_batches"
    params: list[str] = []
    if written_before is not None:
        sql += " WHERE written_at < %s"
        params.append(db_time(written_before))
    with connections[using].cursor() as cursor:
        cursor.execute(sql + " ORDER BY written_at, batch_id", params)
        return [row[0] for row in cursor.fetchall()]


def unsettled_turns(since: datetime, until: datetime, *, using: str = DEFAULT_DB_ALIAS) -> list[tuple[str, int, str, int]]:
    """The completed turns in [since, until) that sit in an unsettled batch here, each named:
    (event id, minute since the epoch, agent id, tokens) -- what `turns_by_minute(kept_only=True)`
    leaves out. Empty, at the cost of one look at a small table, unless a batch is in flight."""
    sql = (
        "SELECT event_id, CAST(strftime('%%s', substr(event_time, 1, 16) || ':00') AS INTEGER) / 60, agent_id, "
        "COALESCE(json_extract(payload, '$.tokens_in'), 0) + COALESCE(json_extract(payload, '$.tokens_out'), 0) "
        f"FROM crewlet_events WHERE event_id IN ({UNSETTLED_IDS}) AND event_type = %s AND event_time >= %s "
        "AND event_time < %s AND COALESCE(json_extract(payload, '$.suspended'), 0) = 0"
    )
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT 1 FROM crewlet_custody_batches LIMIT 1")
        if cursor.fetchone() is None:
            return []
        cursor.execute(sql, ["agent_turn_completed", db_time(since), db_time(until)])
        return [(str(i), int(m), str(a or ""), int(t or 0)) for i, m, a, t in cursor.fetchall()]


def kept_ids(ids: Iterable[str], *, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """Which of `ids` (hex) this node keeps: stored here and in no unsettled batch, so its own
    counts hold them already."""
    wanted = list(dict.fromkeys(ids))
    found: list[str] = []
    with connections[using].cursor() as cursor:
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start:start + _CHUNK]
            marks = ", ".join(["%s"] * len(chunk))
            cursor.execute(f"SELECT event_id FROM crewlet_events WHERE event_id IN ({marks}) "
                           f"AND event_id NOT IN ({UNSETTLED_IDS})", chunk)
            found.extend(str(row[0]) for row in cursor.fetchall())
    return found


def _ids(value) -> list[str]:
    return list(json.loads(value) if isinstance(value, str) else value)
