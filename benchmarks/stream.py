"""The dashboard's live stream and its Event log, each beside a baseline measured in the same run.

    .venv/bin/python benchmarks/stream.py [--sockets 20] [--rate 500] [--seconds 30] [--rows 1000000]

Prints:
- per-socket delivery latency p50/p99 of /ws/stream (target p99 under 500 ms) and the events
  each socket missed (target 0), with SOCKETS sockets connected to a real node process while
  RATE events/s are published for SECONDS seconds; beside it, the same events' latency to a
  plain NATS subscriber on the same broker (what the broker and a Python client cost alone).
  The node dials an external nats-server (`stream.type: nats`, as a fleet member does) so
  this process can publish into its stream as another node would; the publisher is its own
  process, so the clients' work never delays a publish.
- the server time of the Event log's first page over ROWS stored events (target under 100 ms):
  the `events_page` socket query as the consumer runs it (argument validation, the route's
  own function on a read thread, the rows back as items), unfiltered and by one category chip;
  beside it, the same SQL through plain sqlite3 on the same file.
"""
from __future__ import annotations

import sys
from pathlib import Path

# Ordering: before anything imports the standard library's `queue`: this folder holds
# benchmarks/queue.py, and Python puts a script's own folder first on the path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
ROOT = _HERE.parent
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

COMPANY = """
name: bench
providers: {llm: [{name: s, kind: scripted, delay_seconds: 0, reply: ok}]}
org:
  seats:
    - {handle: boss, kind: human, role: founder}
    - {handle: ada, kind: agent, role: engineer, reports_to: boss}
    - {handle: bo, kind: agent, role: engineer, reports_to: boss}
"""


TAIL_POLL_SECONDS = 0.05  # how often the wait for the last deliveries looks again


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


# -- the publisher (its own process) ----------------------------------------------------------
async def publish(url: str, token: str, rate: int, seconds: float, run: str) -> None:
    from engine.queue import topics
    from engine.queue.jetstream import JetStreamQueue
    from engine.queue.jetstream_connection import Dial
    from events.envelope import Event

    queue = await JetStreamQueue.connect(Dial(url, token=token), node_id="bench-publisher")
    total = int(rate * seconds)
    began = time.monotonic()
    for seq in range(total):
        delay = began + seq / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        event = Event.from_wire({
            "id": str(uuid.uuid4()), "type": "external_notification", "timestamp": _now(), "source": "bench",
            "payload": {"bench": run, "seq": seq, "sent_at": time.time()},
            "agent_handle": "ada", "event_kind": "issue_comment", "subject": f"acme/api#{seq % 50}",
            "body": "a comment of the size a webhook's summary usually carries " * 3,
        })
        await queue.publish(topics.event_subject(event.type), event)
    await queue.close()
    print(json.dumps({"published": total, "seconds": round(time.monotonic() - began, 2)}))


def _now() -> str:
    from datetime import datetime, timezone

    from events.envelope import format_timestamp

    return format_timestamp(datetime.now(timezone.utc))


# -- the receivers ------------------------------------------------------------------------------
class Receiver:
    """What one receiver saw of this run's events: latency per event, sequence numbers, gaps."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.latencies: list[float] = []
        self.seen: set[int] = set()
        self.gaps = 0
        self.snapshot = False

    def take(self, payload: dict, arrived: float) -> None:
        if payload.get("bench") == self.run:
            self.latencies.append(arrived - payload["sent_at"])
            self.seen.add(payload["seq"])


def socket_receiver(port: int, token: str, receiver: Receiver, opened: asyncio.Event):
    from autobahn.asyncio.websocket import WebSocketClientFactory, WebSocketClientProtocol

    class Client(WebSocketClientProtocol):
        def onMessage(self, payload, is_binary):  # noqa: N802 (autobahn's name)
            arrived = time.time()
            parsed = json.loads(payload)
            for frame in parsed if isinstance(parsed, list) else [parsed]:
                kind = frame.get("type")
                if kind == "event":
                    receiver.take(frame["event"].get("payload") or {}, arrived)
                elif kind == "gap":
                    receiver.gaps += frame.get("missed", 0)
                elif kind == "snapshot":
                    receiver.snapshot = True
                    opened.set()

    factory = WebSocketClientFactory(f"ws://127.0.0.1:{port}/ws/stream", protocols=["crewlet.bearer", token])
    factory.protocol = Client
    return factory


async def stream_run(args) -> dict:
    import nats

    from engine.queue import topics
    from tests.node.external import ExternalNats
    from tests.node.harness import READER, NodeProcess

    work = Path(tempfile.mkdtemp(prefix="crewlet-bench-stream-"))
    broker = ExternalNats(work / "nats").start()
    node = NodeProcess(home=work / "node-1")
    node.start(company=COMPANY, stream=broker.stream_block(), coordination="embedded-kv")
    run = uuid.uuid4().hex[:8]
    try:
        node.wait_ready(120)
        loop = asyncio.get_running_loop()
        sockets = [Receiver(run) for _ in range(args.sockets)]
        for receiver in sockets:
            opened = asyncio.Event()
            await loop.create_connection(socket_receiver(node.port, READER, receiver, opened), "127.0.0.1", node.port)
            await asyncio.wait_for(opened.wait(), 30)
        baseline = Receiver(run)
        nc = await nats.connect(broker.url, token=broker.token)

        async def on_msg(msg) -> None:
            arrived = time.time()
            baseline.take(json.loads(msg.data).get("payload") or {}, arrived)

        await nc.subscribe(topics.event_subject("external_notification"), cb=on_msg)  # the benchmark's own subject
        publisher = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--publisher", broker.url, broker.token, str(args.rate), str(args.seconds), run,
            cwd=str(ROOT), stdout=subprocess.PIPE)
        out, _ = await publisher.communicate()
        total = int(args.rate * args.seconds)
        deadline = time.monotonic() + 10  # the tail in flight when the publisher finished
        while time.monotonic() < deadline and any(len(r.seen) + r.gaps < total for r in [*sockets, baseline]):
            await asyncio.sleep(TAIL_POLL_SECONDS)
        await nc.close()
        return {"published": json.loads(out.decode().strip().splitlines()[-1]), "total": total,
                "sockets": sockets, "baseline": baseline}
    finally:
        node.stop()
        broker.stop()


def report_stream(args, result: dict) -> None:
    total, sockets, baseline = result["total"], result["sockets"], result["baseline"]
    every = [x for r in sockets for x in r.latencies]
    per_p99 = [pct(r.latencies, 99) for r in sockets]
    missed = [total - len(r.seen) for r in sockets]
    print(f"\n/ws/stream: {args.sockets} sockets, {args.rate} events/s for {args.seconds:g} s "
          f"({total} events; the publisher took {result['published']['seconds']} s)")
    print(f"  {'receiver':<34}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'missed':>9}")
    print(f"  {'each socket (all deliveries)':<34}{pct(every, 50) * 1e3:>9.1f}{pct(every, 99) * 1e3:>9.1f}"
          f"{max(every, default=float('nan')) * 1e3:>9.1f}{sum(missed):>9}")
    print(f"  {'  the slowest socket':<34}{'':>9}{max(per_p99) * 1e3:>9.1f}{'':>9}{max(missed):>9}")
    print(f"  {'baseline: a NATS subscriber':<34}{pct(baseline.latencies, 50) * 1e3:>9.1f}"
          f"{pct(baseline.latencies, 99) * 1e3:>9.1f}{max(baseline.latencies, default=float('nan')) * 1e3:>9.1f}"
          f"{total - len(baseline.seen):>9}")
    gaps = sum(r.gaps for r in sockets)
    print(f"  gap frames reported {gaps} missed; target p99 under 500 ms and 0 missed: "
          f"{'met' if pct(every, 99) < 0.5 and sum(missed) == 0 else 'NOT met'}")


# -- the Event log over a million rows ----------------------------------------------------------
def set_up_django(work: Path) -> None:
    import base64

    key = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    config = work / "crewlet.yaml"
    config.write_text(f"""
node: {{id: bench-node}}
stream: {{type: embedded, store_dir: "{work / 'stream'}"}}
store: {{path: "{work / 'company.db'}"}}
coordination: {{type: local}}
secrets: {{active_key_id: bench, keys: [{{id: bench, material: "{key}"}}]}}
api: {{host: 127.0.0.1, port: 0}}
""")
    os.environ["CREWLET_CONFIG"] = str(config)
    os.environ["DJANGO_SETTINGS_MODULE"] = "crewlet_site.settings"
    import django
    from django.conf import settings

    if Path(settings.DATABASES["default"]["NAME"]) != work / "company.db":
        where = settings.NODE.load_error or settings.DATABASES["default"]["NAME"]
        raise SystemExit(f"benchmark: the store is not the temporary file ({where}); refusing to write elsewhere")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", "events", verbosity=0, interactive=False)


def fill(path: Path, rows: int) -> float:
    """ROWS events in the store, a realistic mix, written through plain sqlite3 (the writer's own
    rate is benchmarks/event_store.py's subject). Each row's payload carries its own id and time."""
    import sqlite3
    from datetime import datetime, timedelta, timezone

    from events.envelope import Event, format_timestamp
    from events.store import INSERT_EVENT_SQL, db_time, rows_for

    kinds = [("agent_turn_completed", {"tokens_in": 1200, "tokens_out": 340, "response": "done " * 200, "turn_id": "t"}),
             ("external_notification", {"event_kind": "issue_comment", "subject": "acme/api#1", "body": "text " * 60}),
             ("agent_phase_completed", {"phase": "act", "user_prompt": "prompt " * 300, "response": "done " * 100}),
             ("auxiliary_spend", {"purpose": "relevance", "calls": 3, "tokens_in": 900})]
    templates = []
    for name, fields in kinds:
        event = Event.from_wire({"id": "00000000-0000-0000-0000-000000000000", "type": name, "timestamp": "2025-01-01T00:00:00.000000Z",
                                 "source": "engine", "payload": {}, "trace_id": "T" * 32, "span_id": "S" * 16,
                                 "agent_id": "6d0d6a4e-5f5e-5c0b-9e8e-2b7b3a1e0001", "agent_handle": "ada", **fields})
        row, _ = rows_for(event)
        templates.append(list(row))
    began = time.monotonic()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    sql = INSERT_EVENT_SQL.replace("%s", "?")
    # The newest row a minute ago: every row inside the history's horizon (events.retention),
    # which the Event log's query reads within.
    t0 = datetime.now(timezone.utc) - timedelta(minutes=1, microseconds=rows * 20)
    batch = []
    for i in range(rows):
        template = templates[0 if i % 10 < 5 else 1 if i % 10 < 8 else 2 if i % 10 < 9 else 3]
        ident, at = uuid.uuid4(), t0 + timedelta(microseconds=i * 20)
        stamp, trace = format_timestamp(at), uuid.uuid4().hex
        row = list(template)
        row[0], row[1], row[10] = ident.hex, db_time(at), trace
        row[17] = template[17].replace("00000000-0000-0000-0000-000000000000", str(ident)) \
            .replace("2025-01-01T00:00:00.000000Z", stamp).replace("T" * 32, trace)
        batch.append(row)
        if len(batch) == 10_000:
            conn.execute("BEGIN")
            conn.executemany(sql, batch)
            conn.execute("COMMIT")
            batch.clear()
    if batch:
        conn.execute("BEGIN")
        conn.executemany(sql, batch)
        conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()
    return time.monotonic() - began


async def page_times(args_for_page: dict, repeat: int) -> list[float]:
    from dashboard import reads

    out = []
    for _ in range(repeat):
        began = time.perf_counter()
        page = await reads.answer("events_page", args_for_page, None)  # a store read: no node needed
        out.append(time.perf_counter() - began)
        assert len(page["items"]) == args_for_page.get("limit", 50)
    return out


def plain_times(path: Path, where: str, params: list, repeat: int) -> list[float]:
    import sqlite3

    conn = sqlite3.connect(path)
    sql = (f"SELECT e.event_time, e.event_id, e.category, e.summary, e.payload FROM crewlet_events e {where} "
           "ORDER BY e.event_time DESC, e.event_id DESC LIMIT 51")
    out = []
    for _ in range(repeat):
        began = time.perf_counter()
        rows = conn.execute(sql, params).fetchall()
        [json.loads(r[4]) for r in rows[:50]]
        out.append(time.perf_counter() - began)
    conn.close()
    return out


def log_run(args) -> None:
    work = Path(tempfile.mkdtemp(prefix="crewlet-bench-log-"))
    set_up_django(work)
    path = work / "company.db"
    took = fill(path, args.rows)
    print(f"\nEvent log first page over {args.rows:,} stored events (filled in {took:.0f} s; {args.repeat} reads each)")
    print(f"  {'read':<52}{'p50 ms':>9}{'p99 ms':>9}")
    cases = [("every event", {"limit": 50}, "", []),
             ("category chip: system", {"limit": 50, "category": "system"}, "WHERE e.category = ?", ["system"])]
    worst = 0.0
    for label, asked, where, params in cases:
        asyncio.run(page_times(asked, 3))  # a warm read thread and page cache, as on a node
        served = asyncio.run(page_times(asked, args.repeat))
        plain = plain_times(path, where, params, args.repeat)
        worst = max(worst, pct(served, 50))
        print(f"  {'events_page query, ' + label:<52}{pct(served, 50) * 1e3:>9.2f}{pct(served, 99) * 1e3:>9.2f}")
        print(f"  {'  baseline: the same SQL in plain sqlite3':<52}{pct(plain, 50) * 1e3:>9.2f}{pct(plain, 99) * 1e3:>9.2f}")
    print(f"  target under 100 ms: {'met' if worst < 0.1 else 'NOT met'}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--publisher":
        url, token, rate, seconds, run = sys.argv[2:7]
        asyncio.run(publish(url, token, int(rate), float(seconds), run))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sockets", type=int, default=20)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--part", choices=("stream", "log"), default=None, help="run one part (each runs in its own process)")
    args = parser.parse_args()
    if args.part == "stream":
        report_stream(args, asyncio.run(stream_run(args)))
    elif args.part == "log":
        log_run(args)
    else:
        # One process per part: the log part sets Django up on its own temporary store.
        flags = [f"--sockets={args.sockets}", f"--rate={args.rate}", f"--seconds={args.seconds}",
                 f"--rows={args.rows}", f"--repeat={args.repeat}"]
        for part in ("stream", "log"):
            subprocess.run([sys.executable, __file__, f"--part={part}", *flags], cwd=str(ROOT), check=True)


if __name__ == "__main__":
    main()
