"""Event store figures: the writer's throughput against plain sqlite3, and a filtered page over 1M rows.

    .venv/bin/python benchmarks/event_store.py [--events 200000] [--rows 1000000] [--repeat 25]

Sets Django up by itself, on a temporary node config and a temporary SQLite file (WAL,
synchronous=NORMAL: the project's settings), and prints one table. Targets: the writer
stores at 0.5x or better the rate of the same rows through `sqlite3.executemany`; the
median filtered first page of `GET /events` over 1,000,000 rows is under 50 ms.
"""
from __future__ import annotations

import sys
from pathlib import Path

# Ordering: before anything imports the standard library's `queue`. This folder holds other
# benchmarks (benchmarks/queue.py), and Python puts a script's own folder first on the path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import argparse
import base64
import gc
import json
import os
import random
import secrets
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(tempfile.mkdtemp(prefix="crewlet-bench-"))
TOKEN = secrets.token_urlsafe(24)
AGENTS = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench/agent-{i}")) for i in range(40)]
HANDLES = [f"agent-{i}" for i in range(40)]
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
BATCH = 1_000


def set_up_django() -> None:
    key = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    config = WORK / "crewlet.yaml"
    config.write_text(
        f"""
node: {{id: bench-node}}
stream: {{type: embedded, store_dir: "{WORK / 'stream'}"}}
store: {{path: "{WORK / 'company.db'}"}}
coordination: {{type: local}}
secrets:
  active_key_id: bench
  keys: [{{id: bench, material: "{key}"}}]
api:
  host: 127.0.0.1
  port: 8000
  external_url: "http://127.0.0.1:8000"
  auth:
    admin: refuse
    tokens:
      - {{id: bench, token: "{TOKEN}", grants: [read]}}
"""
    )
    os.environ["CREWLET_CONFIG"] = str(config)
    os.environ["DJANGO_SETTINGS_MODULE"] = "crewlet_site.settings"
    sys.path.insert(0, str(ROOT))
    import django
    from django.conf import settings

    if settings.NODE.config is None:
        raise SystemExit(f"benchmark: the temporary node config did not load: {settings.NODE.load_error}")
    if Path(settings.DATABASES["default"]["NAME"]) != WORK / "company.db":
        raise SystemExit("benchmark: the store is not the temporary file; refusing to write elsewhere")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", "events", verbosity=0, interactive=False)


def text(rng: random.Random, size: int) -> str:
    words = ["the", "agent", "reviewed", "pull", "request", "and", "found", "three", "issues", "in", "handler",
             "deploy", "staging", "customer", "ticket", "escalated", "budget", "token", "model", "retry", "cache"]
    out: list[str] = []
    n = 0
    while n < size:
        w = rng.choice(words)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:size]


def make_events(count: int):
    """The mix: turn completions (~2 KB), notifications, phase completions (~6 KB prompts), spend.

    Bodies are validated once per (kind, agent, variant) and shared; every event has its own
    id, time and trace, so each is its own row.
    """
    from events.envelope import Event, model_for
    from events.tracing import new_span_id, new_trace_id

    rng = random.Random(7)
    responses = [text(rng, 2_000) for _ in range(8)]
    systems = [text(rng, 4_000) for _ in range(4)]
    users = [text(rng, 2_000) for _ in range(8)]
    bodies = [text(rng, 600) for _ in range(8)]

    def body(kind: str, a: int, v: int) -> dict:
        seat = {"agent_id": AGENTS[a], "agent_handle": HANDLES[a], "agent_role": "engineer"}
        if kind == "agent_turn_completed":
            return {**seat, "turn_id": str(uuid.uuid4()), "conversation_key": f"slack:C{a}:{v}", "tokens_in": 1200,
                    "tokens_out": 340, "duration_ms": 5400, "iterations": 3, "tools_used": ["github", "slack"],
                    "response": responses[v], "outcome": "replied"}
        if kind == "external_notification":
            return {**seat, "event_kind": "issue_comment", "subject": f"acme/api#{v}", "sender": "octocat",
                    "delivery_id": str(uuid.uuid4()), "conversation_identity": f"github:acme/api#{v}",
                    "body": bodies[v], "url": f"https://github.com/acme/api/issues/{v}"}
        if kind == "agent_phase_completed":
            return {**seat, "turn_id": str(uuid.uuid4()), "phase": "act", "iteration": 1, "model": "gpt-4.1",
                    "provider_key": "openai", "tokens_in": 5200, "tokens_out": 800, "duration_ms": 3100,
                    "system_prompt": systems[v % 4], "user_prompt": users[v], "response": responses[(v + 5) % 8],
                    "rounds": [{"round": 1, "tokens_in": 5200, "tokens_out": 800, "stop_reason": "end_turn"}]}
        return {**seat, "purpose": "relevance", "model": "gpt-4.1-mini", "calls": 4, "tokens_in": 900, "tokens_out": 60}

    kinds = ("agent_turn_completed", "external_notification", "agent_phase_completed", "auxiliary_spend")
    models = {(k, a, v): model_for(k).model_validate(body(k, a, v)) for k in kinds for a in range(len(AGENTS)) for v in range(8)}
    events = []
    for i in range(count):
        roll = rng.random()
        kind = kinds[0] if roll < 0.45 else kinds[1] if roll < 0.75 else kinds[2] if roll < 0.95 else kinds[3]
        # Bursts: one event in four shares its microsecond with the one before.
        at = T0 + timedelta(microseconds=(i - (i % 4 == 1)) * 3)
        payload = {"partition_key": f"github:acme/api#{i % 8}"} if kind == "external_notification" else {}
        events.append(Event(
            type=kind, data=models[(kind, i % len(AGENTS), rng.randrange(8))], timestamp=at, source="engine",
            payload=payload, trace_id=new_trace_id(), span_id=new_span_id(), node="bench-node",
        ))
    return events


def sqlite_connection(path: Path) -> sqlite3.Connection:
    """A plain connection with the project's file settings (crewlet_site.settings)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=20)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=20000")
    return conn


ROUNDS = 4  # writer and plain take turns, so a noisy neighbour lands on both


class WriterRun:
    """The writer, fed by a publisher that paces itself to what it sustains (nothing is dropped:
    the figure is the writer's rate, not the cost of refusing events)."""

    def __init__(self) -> None:
        from engine.queue import topics
        from events.store import EventStoreWriter

        self.writer = EventStoreWriter(batch_size=BATCH)
        self.topics = topics
        self.total = 0

    def round(self, events) -> float:
        writer = self.writer
        gc.collect()
        started = time.perf_counter()
        for event in events:
            while writer.backlog >= writer.queue_size - 1:
                time.sleep(0.0005)
            writer(self.topics.event_subject(event.type), event)
        writer.flush()
        self.total += len(events)
        return time.perf_counter() - started

    def close(self) -> None:
        self.writer.close()
        stats = self.writer.stats
        if stats.written != self.total or stats.dropped or stats.failed:
            raise SystemExit(f"benchmark: the writer lost events: {stats}")


class PlainRun:
    """The same rows, built by the same code outside the clock, through plain sqlite3.executemany
    into a second file with the same schema and the same file settings."""

    def __init__(self) -> None:
        from events.store import INSERT_EVENT_SQL, INSERT_PARTY_SQL

        source = sqlite3.connect(WORK / "company.db")
        schema = [sql for (sql,) in source.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL "
            "AND tbl_name IN ('crewlet_events', 'crewlet_event_parties') ORDER BY type = 'index'"
        )]
        source.close()
        self.conn = sqlite_connection(WORK / "plain.db")
        for sql in schema:
            self.conn.execute(sql)
        self.insert_event = INSERT_EVENT_SQL.replace("%s", "?")
        self.insert_party = INSERT_PARTY_SQL.replace("%s", "?")
        self.total = 0

    def round(self, events) -> float:
        from events.store import rows_for

        gc.collect()
        elapsed = 0.0
        for start in range(0, len(events), BATCH):
            rows, parties = [], []
            for event in events[start:start + BATCH]:
                row, party_rows = rows_for(event)
                rows.append(row)
                parties.extend(party_rows)
            began = time.perf_counter()
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany(self.insert_event, rows)
            self.conn.executemany(self.insert_party, parties)
            self.conn.execute("COMMIT")
            elapsed += time.perf_counter() - began
        self.total += len(events)
        return elapsed

    def close(self) -> None:
        count = self.conn.execute("SELECT count(*) FROM crewlet_events").fetchone()[0]
        self.conn.close()
        if count != self.total:
            raise SystemExit(f"benchmark: plain insert stored {count} of {self.total}")


def measure_writes(events) -> tuple[float, float]:
    """Seconds the writer took and seconds plain executemany took, for all of `events`."""
    writer, plain = WriterRun(), PlainRun()
    writer_s = plain_s = 0.0
    step = -(-len(events) // ROUNDS)
    for start in range(0, len(events), step):
        chunk = events[start:start + step]
        writer_s += writer.round(chunk)
        plain_s += plain.round(chunk)
    writer.close()
    plain.close()
    return writer_s, plain_s


def fill_to(total_rows: int) -> float:
    """Top the store up to `total_rows` with plain executemany: smaller rows, same columns, same indexes."""
    from events.store import INSERT_EVENT_SQL, INSERT_PARTY_SQL, db_time

    conn = sqlite_connection(WORK / "company.db")
    have = conn.execute("SELECT count(*) FROM crewlet_events").fetchone()[0]
    rng = random.Random(11)
    kinds = [("agent_turn_completed", "system", 1), ("external_notification", "notification", 1),
             ("agent_phase_completed", "system", 1), ("task_assigned", "task", 1), ("auxiliary_spend", "system", 0),
             ("a2a_message_sent", "a2a", 1), ("inbound_delivery", "webhook", 1), ("notification_skipped", "notification", 1)]
    weights = [30, 25, 20, 5, 5, 5, 5, 5]
    bodies = [text(rng, n) for n in (100, 200, 400, 800) for _ in range(8)]
    insert_event = INSERT_EVENT_SQL.replace("%s", "?")
    insert_party = INSERT_PARTY_SQL.replace("%s", "?")
    started = time.perf_counter()
    # Bulk load: drop the secondary indexes, insert, and build them again from the very
    # statements the migration made (building an index once is far cheaper than growing it
    # row by row on random keys). The unique constraints stay in place throughout.
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
        "AND tbl_name IN ('crewlet_events', 'crewlet_event_parties')"
    ).fetchall()
    for name, _ in indexes:
        conn.execute(f'DROP INDEX "{name}"')
    # Spread over the 30 days before the writer's rows, so pages walk a deep index.
    span_us = 30 * 24 * 3600 * 1_000_000
    begin = T0 - timedelta(days=30)
    i = 0
    while have < total_rows:
        rows, parties = [], []
        for _ in range(min(10_000, total_rows - have)):
            etype, category, feed = rng.choices(kinds, weights)[0]
            label = "webhook:issue_comment" if etype == "inbound_delivery" else etype
            a = rng.randrange(len(AGENTS))
            ident = uuid.uuid4()
            at = begin + timedelta(microseconds=((i - (i % 5 == 1)) * span_us) // total_rows)
            trace_id = uuid.uuid4().hex
            wire = {"id": str(ident), "type": etype, "timestamp": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "source": "engine",
                    "payload": {}, "trace_id": trace_id, "span_id": trace_id[:16], "parent_span_id": "", "delegation_depth": 0,
                    "parent_turn_id": "", "delegation_chain": [], "node": "bench-node", "agent_id": AGENTS[a],
                    "agent_handle": HANDLES[a], "text": bodies[i % len(bodies)]}
            t = db_time(at)
            rows.append((ident.hex, t, label, "engine", category, AGENTS[a], "engineer", "", "", "", trace_id, trace_id[:16], "",
                         "bench-node", "", "", f"{HANDLES[a]} {etype.replace('_', ' ')}",
                         json.dumps(wire, separators=(",", ":")), feed))
            parties.append((t, ident.hex, AGENTS[a]))
            parties.append((t, ident.hex, HANDLES[a]))
            i += 1
            have += 1
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(insert_event, rows)
        conn.executemany(insert_party, parties)
        conn.execute("COMMIT")
    for _, sql in indexes:
        conn.execute(sql)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.perf_counter() - started


def median_ms(call, repeat: int) -> float:
    call()  # warm the page cache and the statement cache once
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


def measure_queries(repeat: int) -> list[tuple[str, float, float]]:
    from django.test import Client

    from events.queries import events_page

    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
    some_agent = AGENTS[7]
    cases = [
        ("no filter", {}),
        ("category=notification", {"category": "notification"}),
        ("type=agent_phase_completed", {"types": ["agent_phase_completed"]}),
        ("type=a2a_message_sent&type=task_assigned", {"types": ["a2a_message_sent", "task_assigned"]}),
        ("agent=<id>", {"agent": some_agent}),
        ("agent=<handle>", {"agent": HANDLES[7]}),
        ("category=system&feed_only", {"category": "system", "feed_only": True}),
        ("category=task&since/until (1 day)", {"category": "task", "since": "2024-12-10T00:00:00Z", "until": "2024-12-11T00:00:00Z"}),
        ("agent=<id>&category=a2a", {"agent": some_agent, "category": "a2a"}),
    ]
    out = []
    for label, kwargs in cases:
        page = events_page(**kwargs)
        if len(page["items"]) != 50:
            raise SystemExit(f"benchmark: {label} returned {len(page['items'])} items, expected a full page")
        query = {("type" if k == "types" else k): v for k, v in kwargs.items()}
        response = client.get("/events", query, **auth)
        if response.status_code != 200 or len(response.json()["items"]) != 50:
            raise SystemExit(f"benchmark: GET /events {label} answered {response.status_code}: {response.content[:200]!r}")
        # A deep page too: the cursor is a seek, so page 20 should cost what page 1 does.
        fn = median_ms(lambda kwargs=kwargs: events_page(**kwargs), repeat)
        route = median_ms(lambda query=query: client.get("/events", query, **auth), repeat)
        out.append((label, fn, route))
    cursor = None
    for _ in range(20):
        cursor = events_page(category="notification", cursor=cursor)["next_cursor"]
    deep = median_ms(lambda: events_page(category="notification", cursor=cursor), repeat)
    out.append(("category=notification, page 21", deep, float("nan")))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=25)
    args = parser.parse_args()
    try:
        set_up_django()
        began = time.perf_counter()
        events = make_events(args.events)
        build = time.perf_counter() - began
        avg = sum(len(e.to_json()) for e in events[:5_000]) / 5_000

        writer_s, plain_s = measure_writes(events)
        del events
        gc.collect()
        fill_s = fill_to(args.rows)
        queries = measure_queries(args.repeat)
        size_mb = (WORK / "company.db").stat().st_size / 1e6

        writer_rate, plain_rate = args.events / writer_s, args.events / plain_s
        print()
        print(f"event store benchmark  (sqlite {sqlite3.sqlite_version}, {os.cpu_count()} cpus, WAL, synchronous=NORMAL)")
        print(f"  {args.events:,} mixed events, mean wire size {avg:,.0f} B (built in {build:.1f} s, not timed)")
        print()
        print(f"  {'writer (listener -> thread -> INSERT OR IGNORE)':<52}{writer_rate:>12,.0f} events/s  {writer_s:>7.2f} s")
        print(f"  {'plain sqlite3.executemany, same rows and schema':<52}{plain_rate:>12,.0f} events/s  {plain_s:>7.2f} s")
        ratio = writer_rate / plain_rate
        print(f"  {'ratio writer / plain (target >= 0.5)':<52}{ratio:>12.2f}  {'ok' if ratio >= 0.5 else 'MISSED'}")
        print()
        print(f"  first page (limit 50) over {args.rows:,} rows, {size_mb:,.0f} MB on disk, median of {args.repeat}"
              f" (filled in {fill_s:.1f} s)")
        print(f"  {'filter':<44}{'events_page ms':>16}{'GET /events ms':>16}")
        worst = 0.0
        for label, fn, route in queries:
            route_text = "" if route != route else f"{route:.2f}"
            print(f"  {label:<44}{fn:>16.2f}{route_text:>16}")
            worst = max(worst, fn, route if route == route else 0)
        print(f"  {'slowest (target < 50 ms)':<44}{worst:>16.2f}  {'ok' if worst < 50 else 'MISSED'}")
    finally:
        from django.db import connections

        connections.close_all()
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
