"""The fleet's history: a fan-out read beside a local one, and custody's cost on the publish path.

    .venv/bin/python benchmarks/history.py [--rows 50000] [--repeat 40] [--publishes 5000]

Sets Django up by itself on a temporary node config with three SQLite stores (one per simulated
node, WAL, synchronous=NORMAL: the project's settings) and one embedded nats-server, and prints
two tables measured in one run:

- one page of `GET /events` (limit 50) read from this node's store alone, and asked of three
  nodes over request/reply and merged (events.fleet): median and p95 of interleaved rounds, so
  both see the same machine;
- publishing N events on one JetStream queue with no publish listener, with the data node's
  store writer, and with the custody sender of a node without data (per publish, and the
  custody's whole trip until a data node has kept every event).
"""
from __future__ import annotations

import sys
from pathlib import Path

# Ordering: before anything imports the standard library's `queue` (benchmarks/queue.py is a sibling).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import argparse
import asyncio
import base64
import os
import secrets
import shutil
import statistics
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(tempfile.mkdtemp(prefix="crewlet-bench-history-"))
STORES = {"node-a": "default", "node-b": "peer1", "node-c": "peer2"}


def set_up_django() -> None:
    key = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    config = WORK / "crewlet.yaml"
    config.write_text(f"""
node: {{id: node-a}}
stream: {{type: embedded, store_dir: "{WORK / 'stream'}"}}
store: {{path: "{WORK / 'node-a.db'}"}}
coordination: {{type: local}}
secrets:
  active_key_id: bench
  keys: [{{id: bench, material: "{key}"}}]
api: {{host: 127.0.0.1, port: 8000, external_url: "http://127.0.0.1:8000",
       auth: {{admin: refuse, tokens: [{{id: bench, token: "{secrets.token_urlsafe(24)}", grants: [read]}}]}}}}
""")
    os.environ["CREWLET_CONFIG"] = str(config)
    os.environ["DJANGO_SETTINGS_MODULE"] = "crewlet_site.settings"
    sys.path.insert(0, str(ROOT))
    import django
    from django.conf import settings

    if settings.NODE.config is None:
        raise SystemExit(f"benchmark: the temporary node config did not load: {settings.NODE.load_error}")
    for node, alias in STORES.items():
        if alias != "default":
            settings.DATABASES[alias] = {**settings.DATABASES["default"], "NAME": str(WORK / f"{node}.db")}
    if Path(settings.DATABASES["default"]["NAME"]) != WORK / "node-a.db":
        raise SystemExit("benchmark: the store is not the temporary file; refusing to write elsewhere")
    django.setup()
    from django.core.management import call_command

    for alias in STORES.values():
        call_command("migrate", "events", database=alias, verbosity=0, interactive=False)


def fill(rows: int) -> None:
    """`rows` events on each store, interleaved in time across the three, an hour's worth."""
    from events.store import write_events
    from events.types.task import TaskAssigned  # noqa: F401  (registers the type)
    from events.envelope import Event, format_timestamp

    now = datetime.now(timezone.utc) - timedelta(hours=1)
    for n, alias in enumerate(STORES.values()):
        batch = []
        for i in range(rows):
            at = now + timedelta(microseconds=(i * 3 + n) * 1200)
            batch.append(Event.from_wire({
                "id": str(uuid.uuid4()), "type": "task_assigned" if i % 4 else "external_notification",
                "timestamp": format_timestamp(at), "source": "bench", "payload": {}, "trace_id": uuid.uuid4().hex,
                "span_id": uuid.uuid4().hex[:16], "node": list(STORES)[n], "agent_id": f"agent-{i % 40}",
                "task": "x" * 200}))
            if len(batch) == 1000:
                write_events(batch, using=alias)
                batch = []
        write_events(batch, using=alias)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def reads(repeat: int) -> list[tuple[str, list[float], list[float]]]:
    from engine.history.eventfan import HistoryAnswerer, QueueTransport
    from engine.history.reads import StoreThreads
    from engine.queue.broker import EmbeddedBroker
    from engine.queue.jetstream import JetStreamQueue
    from engine.queue.jetstream_connection import Dial
    from events.fleet import FleetReads

    broker = EmbeddedBroker(store_dir=str(WORK / "stream-reads"), server_name="bench-reads")
    await broker.start()
    queues, threads, answerers = [], [], []
    try:
        for node, alias in STORES.items():
            q = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id=node)
            queues.append(q)
            pool = StoreThreads(4, node)
            threads.append(pool)
            if node != "node-a":
                answerer = HistoryAnswerer(queue=q, node_id=node, horizon_hours=720, run_read=pool, using=alias)
                await answerer.start()
                answerers.append(answerer)

        async def roster() -> list[str]:
            return list(STORES)

        local = FleetReads(node_id="node-a", run_read=threads[0])
        fleet = FleetReads(node_id="node-a", transport=QueueTransport(queues[0]), roster=roster, run_read=threads[0])
        cases = [("newest page, no filter", {}), ("category=notification", {"category": "notification"}),
                 ("agent=agent-7", {"agent": "agent-7"})]
        out = []
        for label, filters in cases:
            alone, across = [], []
            for _ in range(3):  # warm both paths (connections, statement cache)
                await local.events_page(limit=50, **filters)
                page = await fleet.events_page(limit=50, **filters)
                assert page["coverage"]["complete"], page["coverage"]
            for _ in range(repeat):
                t = time.perf_counter()
                await local.events_page(limit=50, **filters)
                alone.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                await fleet.events_page(limit=50, **filters)
                across.append((time.perf_counter() - t) * 1000)
            out.append((label, alone, across))
        return out
    finally:
        for answerer in answerers:
            await answerer.stop(False)
        for q in queues:
            await q.close()
        for pool in threads:
            pool.close()
        await broker.stop()


VARIANTS = ("no listener", "store writer (a data node)", "custody sender (a node without data)")


async def publishing(count: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Per variant, the median over `rounds` interleaved rounds of (µs per publish, events/s until
    every event is where it goes: published; written; kept by a data node)."""
    from engine.queue.broker import EmbeddedBroker

    broker = EmbeddedBroker(store_dir=str(WORK / "stream-publish"), server_name="bench-publish")
    await broker.start()
    seen: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    try:
        await _publish_round(broker, VARIANTS[0], 200)  # the streams exist before anything is timed
        for _ in range(rounds):
            for variant in VARIANTS:
                seen[variant].append(await _publish_round(broker, variant, count))
    finally:
        await broker.stop()
    return {v: (statistics.median(p for p, _ in got), statistics.median(r for _, r in got)) for v, got in seen.items()}


async def _publish_round(broker, variant: str, count: int) -> tuple[float, float]:
    from engine.coord.local import LocalCoord
    from engine.history.custody import CustodyKeeper, CustodySender
    from engine.history.reads import StoreThreads
    from engine.queue import topics
    from engine.queue.jetstream import JetStreamQueue
    from engine.queue.jetstream_connection import Dial
    from events.envelope import new
    from events.store import EventStoreWriter
    from events.tracing import trace_of
    from events.types.task import TaskAssigned

    for alias in ("peer1", "peer2"):
        await asyncio.to_thread(_empty, alias)
    batch = [new(TaskAssigned(agent_id=f"agent-{i % 40}", agent_handle=f"a{i % 40}", task="y" * 200), trace_of(),
                 source="bench") for i in range(count)]
    q = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="node-s")
    writes = StoreThreads(1, "bench-custody")
    writer = sender = keeper = data = None
    if variant == VARIANTS[1]:
        writer = EventStoreWriter(using="peer1")
        q.add_publish_listener(writer)
    elif variant == VARIANTS[2]:
        data = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="node-d")
        keeper = CustodyKeeper(queue=data, coord=LocalCoord(), node_id="node-d", run_write=writes, horizon_hours=720,
                               using="peer2")
        await keeper.start()
        sender = CustodySender(q, "node-s")
        q.add_publish_listener(sender)
        await sender.start()
    subject = topics.event_subject("task_assigned")
    start = time.perf_counter()
    for event in batch:
        await q.publish(subject, event)
    published = time.perf_counter() - start
    if writer is not None:
        await asyncio.to_thread(writer.close, 60)
    if sender is not None:
        await sender.close(60)
        while await asyncio.to_thread(_count, "peer2") < count:
            await asyncio.sleep(0.005)
        await keeper.stop(False)
        await data.close()
    total = time.perf_counter() - start
    await q.close()
    writes.close()
    return published / count * 1e6, count / total


def listener_costs(count: int) -> dict[str, float]:
    """µs one publish listener call takes on the publishing loop, per event (no broker): what
    each adds to every publish beside the broker's acknowledgement."""
    from engine.history.custody import CustodySender
    from engine.queue import topics
    from events.envelope import new
    from events.store import EventStoreWriter
    from events.tracing import trace_of
    from events.types.task import TaskAssigned

    subject = topics.event_subject("task_assigned")
    batch = [new(TaskAssigned(agent_id=f"agent-{i % 40}", agent_handle=f"a{i % 40}", task="y" * 200), trace_of(),
                 source="bench").with_node("node-s") for i in range(count)]
    out = {}
    writer = EventStoreWriter(using="peer1", queue_size=count + 10)

    async def sending() -> float:
        sender = CustodySender(None, "node-s", capacity=count + 10)  # no loop started: its call alone
        start = time.perf_counter()
        for event in batch:
            sender(subject, event)
        return time.perf_counter() - start

    start = time.perf_counter()
    for event in batch:
        writer(subject, event)
    out[VARIANTS[1]] = (time.perf_counter() - start) / count * 1e6
    writer.close(60)
    out[VARIANTS[2]] = asyncio.run(sending()) / count * 1e6
    return out


def _empty(alias: str) -> None:
    from django.db import connections

    with connections[alias].cursor() as cursor:
        cursor.execute("DELETE FROM crewlet_events")
        cursor.execute("DELETE FROM crewlet_event_parties")


def _count(alias: str) -> int:
    from django.db import connections

    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM crewlet_events")
        return cursor.fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000, help="events on each of the three stores")
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--publishes", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    try:
        set_up_django()
        started = time.perf_counter()
        fill(args.rows)
        filled = time.perf_counter() - started
        read_rows = asyncio.run(reads(args.repeat))
        publish_rows = asyncio.run(publishing(args.publishes, args.rounds))
        costs = listener_costs(args.publishes)
        print()
        print(f"fleet history benchmark  ({os.cpu_count()} cpus, one nats-server, three SQLite stores)")
        print(f"  {args.rows:,} events on each store (filled in {filled:.1f} s, not timed); one page, limit 50, "
              f"{args.repeat} interleaved rounds")
        print(f"  {'page':<28}{'local ms p50':>14}{'p95':>8}{'3 nodes ms p50':>17}{'p95':>8}{'added p50':>11}")
        for label, alone, across in read_rows:
            p50a, p50f = statistics.median(alone), statistics.median(across)
            print(f"  {label:<28}{p50a:>14.2f}{pct(alone, 0.95):>8.2f}{p50f:>17.2f}{pct(across, 0.95):>8.2f}{p50f - p50a:>+11.2f}")
        print()
        print(f"  publishing {args.publishes:,} events on one JetStream queue (sync: always), median of {args.rounds} "
              "interleaved rounds")
        print(f"  {'listener':<40}{'us per publish':>16}{'events/s, all kept':>20}{'listener call us':>18}")
        for variant in VARIANTS:
            per, rate = publish_rows[variant]
            call = costs.get(variant)
            print(f"  {variant:<40}{per:>16.1f}{rate:>20,.0f}{(f'{call:.1f}' if call is not None else '-'):>18}")
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
