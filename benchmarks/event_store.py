"""Event store figures: the writer's throughput against plain sqlite3, and `GET /events` over
HTTP on a store of 1,000,000 rows the writer grew.

    .venv/bin/python benchmarks/event_store.py [--events 200000] [--rows 1000000] [--repeat 100]

Sets Django up by itself, on a temporary node config and a temporary SQLite file (WAL,
synchronous=NORMAL: the project's settings), and prints two tables measured in one run:

- writes: `--events` mixed events (mean ~3.5 KB on the wire) through the store's publish
  listener (`events.store.EventStoreWriter`) against the same rows through plain
  `sqlite3.executemany`, in alternating rounds. Target: the writer at 0.5x or better.
- reads: the same writer, the listener path a node publishes through, grows the store on to
  `--rows` rows of the same mix (in chunks, so memory stays bounded), spread over the 29 days
  before the run so every row is inside the history horizon a read is floored at. The site's
  ASGI application is then served on 127.0.0.1 by the node's own listener (engine.node.server:
  Uvicorn, httptools, uvloop) in a thread, and the first page (limit 50) of `GET /events` per
  filter is asked over one kept-alive HTTP connection with the read token, interleaved with
  the baseline: `events.queries.events_page()` called in-process on the same store with the
  same filter and the same horizon floor (the query the route runs). Median and p95 of
  `--repeat` each. Target: the median first page over HTTP under 50 ms.

The served application is the site's, without a node around it: a node alone in its fleet,
whose reads ask no peers (benchmarks/history.py measures the fan-out).
"""
from __future__ import annotations

import sys
from pathlib import Path

# Ordering: before anything imports the standard library's `queue`. This folder holds other
# benchmarks (benchmarks/queue.py), and Python puts a script's own folder first on the path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import argparse
import asyncio
import base64
import bisect
import gc
import http.client
import json
import os
import random
import secrets
import shutil
import sqlite3
import statistics
import tempfile
import threading
import time
import urllib.parse
import uuid
from datetime import datetime, timedelta, timezone

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(tempfile.mkdtemp(prefix="crewlet-bench-"))
TOKEN = secrets.token_urlsafe(24)
AGENTS = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench/agent-{i}")) for i in range(40)]
HANDLES = [f"agent-{i}" for i in range(40)]
# The store spans the 29 days before the run: inside the 30-day history horizon every read
# is floored at (events.retention.HISTORY_HOURS), so the route sees every row.
SPAN = timedelta(days=29)
T0 = datetime.now(timezone.utc).replace(microsecond=0) - SPAN
BATCH = 1_000
CHUNK = 50_000  # events built at a time while the store grows


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


# The write measurement's mix: turn completions (~2 KB), notifications, phase completions
# (~6 KB prompts), spend. The grown store adds the two kinds the read filters ask for (a task
# reaching a seat, an A2A message) at 2.5% each, the rest in the same proportions.
WRITE_MIX = (("agent_turn_completed", 45), ("external_notification", 30), ("agent_phase_completed", 20),
             ("auxiliary_spend", 5))
STORE_MIX = (*((kind, share * 0.95) for kind, share in WRITE_MIX), ("task_assigned", 2.5), ("a2a_message_sent", 2.5))


class EventMaker:
    """Mixed events, made on demand: event `i` of a store of `total` sits at T0 + i * SPAN / total.

    Bodies are validated once per (kind, agent, variant) and shared; every event has its own
    id, time and trace, so each is its own row.
    """

    def __init__(self, total: int) -> None:
        from events.envelope import model_for

        self.step = SPAN / max(total, 1)
        self.rng = random.Random(7)
        rng = self.rng
        responses = [text(rng, 2_000) for _ in range(8)]
        systems = [text(rng, 4_000) for _ in range(4)]
        users = [text(rng, 2_000) for _ in range(8)]
        bodies = [text(rng, 600) for _ in range(8)]
        tasks = [text(rng, 300) for _ in range(8)]

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
            if kind == "task_assigned":
                return {**seat, "task_id": f"task-{a}-{v}", "task": tasks[v], "assigned_by": "operator"}
            if kind == "a2a_message_sent":
                peer = HANDLES[(a + 1) % len(HANDLES)]
                return {**seat, "channel_id": f"ch-{a}-{v}", "requester": HANDLES[a], "responder": peer,
                        "turn_id": str(uuid.uuid4()), "kind": "ask", "sender": HANDLES[a], "recipient": peer,
                        "body": bodies[(v + 3) % 8]}
            return {**seat, "purpose": "relevance", "model": "gpt-4.1-mini", "calls": 4, "tokens_in": 900, "tokens_out": 60}

        kinds = [kind for kind, _ in STORE_MIX]
        self.models = {(k, a, v): model_for(k).model_validate(body(k, a, v))
                       for k in kinds for a in range(len(AGENTS)) for v in range(8)}

    def events(self, start: int, count: int, mix=WRITE_MIX) -> list:
        """Events `start` .. `start + count - 1` of the store, their kinds drawn from `mix`."""
        from events.envelope import Event
        from events.tracing import new_span_id, new_trace_id

        kinds = [kind for kind, _ in mix]
        total = sum(share for _, share in mix)
        bounds, run = [], 0.0
        for _, share in mix:
            run += share / total
            bounds.append(run)
        rng, step, out = self.rng, self.step, []
        for i in range(start, start + count):
            kind = kinds[min(bisect.bisect_right(bounds, rng.random()), len(kinds) - 1)]
            # Bursts: one event in four shares its microsecond with the one before.
            at = T0 + (i - (i % 4 == 1)) * step
            payload = {"partition_key": f"github:acme/api#{i % 8}"} if kind == "external_notification" else {}
            out.append(Event(
                type=kind, data=self.models[(kind, i % len(AGENTS), rng.randrange(8))], timestamp=at, source="engine",
                payload=payload, trace_id=new_trace_id(), span_id=new_span_id(), node="bench-node",
            ))
        return out


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


def grow(maker: EventMaker, start: int, total: int) -> tuple[float, float]:
    """Grow the store from `start` to `total` rows through the writer, a chunk of events at a
    time: the seconds the writer took (building the events is not timed) and the mean wire size."""
    if start >= total:
        return 0.0, 0.0
    writer = WriterRun()
    seconds = mean = 0.0
    for begin in range(start, total, CHUNK):
        chunk = maker.events(begin, min(CHUNK, total - begin), STORE_MIX)
        if not mean:
            mean = sum(len(e.to_json()) for e in chunk[:5_000]) / min(5_000, len(chunk))
        seconds += writer.round(chunk)
        del chunk
        print(f"  ... {min(begin + CHUNK, total):,} rows", file=sys.stderr, flush=True)
    writer.close()
    return seconds, mean


class Served:
    """The site's ASGI application on 127.0.0.1 at a port the system picks, served by the node's
    own listener (engine.node.server: the socket bound first, Uvicorn with the node's settings on
    uvloop) on a thread of its own until `close()`."""

    def __init__(self) -> None:
        from crewlet_site.asgi import application
        from engine.node import server

        sock = server.bind("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        self._stop = threading.Event()

        async def main() -> int:
            await asyncio.to_thread(self._stop.wait)
            return 0

        self._thread = threading.Thread(target=server.serve, args=(application, sock, main), name="bench-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


class Http:
    """One kept-alive HTTP/1.1 connection to the served site, with the read token."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {TOKEN}"}

    def get(self, path: str, query: dict) -> tuple[int, bytes]:
        self.conn.request("GET", f"{path}?{urllib.parse.urlencode(query, doseq=True)}" if query else path, headers=self.headers)
        response = self.conn.getresponse()
        return response.status, response.read()

    def page(self, query: dict, label: str) -> dict:
        status, body = self.get("/events", query)
        if status != 200:
            raise SystemExit(f"benchmark: GET /events {label} answered {status}: {body[:200]!r}")
        return json.loads(body)

    def close(self) -> None:
        self.conn.close()


def timed(call) -> float:
    began = time.perf_counter()
    call()
    return (time.perf_counter() - began) * 1000


def p50_p95(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples), statistics.quantiles(samples, n=20, method="inclusive")[18]


def compare(local, remote, repeat: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """Median and p95 ms of `local()` (in-process) and `remote()` (over HTTP), in alternating
    calls so a noisy neighbour lands on both; one call of each first warms the caches."""
    local(), remote()
    here, there = [], []
    for _ in range(repeat):
        here.append(timed(local))
        there.append(timed(remote))
    return p50_p95(here), p50_p95(there)


def measure_queries(port: int, repeat: int) -> list[tuple[str, tuple[float, float], tuple[float, float]]]:
    from events.queries import events_page
    from events.retention import HISTORY_HOURS, floor_at

    # The route floors every read at the history horizon; the baseline runs the same query.
    floor = floor_at(datetime.now(timezone.utc), HISTORY_HOURS)
    day = T0 + SPAN * 2 / 3
    since, until = (d.strftime("%Y-%m-%dT00:00:00Z") for d in (day, day + timedelta(days=1)))
    some_agent = AGENTS[7]
    cases = [
        ("no filter", {}),
        ("category=notification", {"category": "notification"}),
        ("type=agent_phase_completed", {"types": ["agent_phase_completed"]}),
        ("type=a2a_message_sent&type=task_assigned", {"types": ["a2a_message_sent", "task_assigned"]}),
        ("agent=<id>", {"agent": some_agent}),
        ("agent=<handle>", {"agent": HANDLES[7]}),
        ("category=system&feed_only", {"category": "system", "feed_only": True}),
        ("category=task&since/until (1 day)", {"category": "task", "since": since, "until": until}),
        ("agent=<id>&category=a2a", {"agent": some_agent, "category": "a2a"}),
    ]
    client = Http(port)
    out = []
    try:
        for label, kwargs in cases:
            query = {("type" if k == "types" else k): ("true" if v is True else v) for k, v in kwargs.items()}
            page = events_page(**kwargs, floor=floor)
            served = client.page(query, label)
            ids = [item["id"] for item in page["items"]]
            if len(ids) != 50 or [item["id"] for item in served["items"]] != ids:
                raise SystemExit(f"benchmark: {label}: events_page returned {len(ids)} items and GET /events "
                                 f"{len(served['items'])}; expected the same full page")
            out.append((label, *compare(lambda kwargs=kwargs: events_page(**kwargs, floor=floor),
                                        lambda query=query: client.get("/events", query), repeat)))
        # A deep page too: the cursor is a seek, so page 21 should cost what page 1 does.
        cursor = served_cursor = None
        for _ in range(20):
            cursor = events_page(category="notification", cursor=cursor, floor=floor)["next_cursor"]
            served_cursor = client.page({"category": "notification", **({"cursor": served_cursor} if served_cursor else {})},
                                        "category=notification, a deeper page")["next_cursor"]
        out.append(("category=notification, page 21", *compare(
            lambda: events_page(category="notification", cursor=cursor, floor=floor),
            lambda: client.get("/events", {"category": "notification", "cursor": served_cursor}), repeat)))
    finally:
        client.close()
    return out


def on_disk_mb() -> tuple[float, float]:
    """The store's file and its write-ahead log, in MB."""
    def mb(name: str) -> float:
        return (WORK / name).stat().st_size / 1e6 if (WORK / name).exists() else 0.0

    return mb("company.db"), mb("company.db-wal")


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--events", type=int, default=200_000, help="events in the write measurement")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows the writer grows the store to for the reads")
    parser.add_argument("--repeat", type=int, default=100, help="requests per filter (and as many in-process calls)")
    args = parser.parse_args()
    served = None
    try:
        for flag in ("events", "rows", "repeat"):
            if getattr(args, flag) < 1:
                raise SystemExit(f"benchmark: --{flag}: expected a positive number, got {getattr(args, flag)}")
        run_began = time.perf_counter()
        set_up_django()
        began = time.perf_counter()
        maker = EventMaker(max(args.events, args.rows))
        events = maker.events(0, args.events)
        build = time.perf_counter() - began
        avg = sum(len(e.to_json()) for e in events[:5_000]) / min(5_000, len(events))

        writer_s, plain_s = measure_writes(events)
        del events
        (WORK / "plain.db").unlink()
        gc.collect()
        grow_s, grown_avg = grow(maker, args.events, args.rows)
        rows = sqlite3.connect(WORK / "company.db").execute("SELECT count(*) FROM crewlet_events").fetchone()[0]
        size_mb, wal_mb = on_disk_mb()
        served = Served()
        queries = measure_queries(served.port, args.repeat)
        run_s = time.perf_counter() - run_began

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
        grown = rows - args.events
        rate = f" in {grow_s:.0f} s, {grown / grow_s:,.0f} events/s, mean wire size {grown_avg:,.0f} B" if grow_s else ""
        print(f"  store: {rows:,} rows, {size_mb:,.0f} MB on disk (and {wal_mb:,.0f} MB of WAL), grown by the writer: "
              f"the write measurement's rows and {grown:,} more{rate}")
        print("  first page (limit 50): GET /events over HTTP (uvicorn, 127.0.0.1, one kept-alive connection)")
        print(f"  beside events_page() in-process, same filter and horizon floor; ms, median / p95 of {args.repeat}")
        print(f"  {'filter':<44}{'events_page()':>20}{'GET /events':>20}")
        worst = worst_p95 = 0.0
        for label, (fn, fn95), (route, route95) in queries:
            print(f"  {label:<44}{fn:>11.2f} / {fn95:>6.2f}{route:>11.2f} / {route95:>6.2f}")
            worst, worst_p95 = max(worst, route), max(worst_p95, route95)
        print(f"  {'slowest GET /events median (target < 50 ms)':<64}{worst:>11.2f}  {'ok' if worst < 50 else 'MISSED'}")
        print(f"  {'slowest GET /events p95':<64}{worst_p95:>11.2f}")
        print(f"\n  whole run {run_s / 60:.1f} min")
    finally:
        if served is not None:
            served.close()
        from django.apps import apps

        if apps.ready:
            from django.db import connections

            connections.close_all()
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
