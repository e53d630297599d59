"""A fleet beside one node, and mailbox provisioning beside raw consumer creates, measured in
one run on this machine.

Prints:
- publish -> handled -> acked for three nodes, each embedding a member of a three-member
  cluster (stream.replicas 3), beside one node on a solo embedded broker: N tasks posted to
  the seats' inboxes through the nodes' REST API (the broker acknowledged each), each worked
  by a turn on the scripted provider (no model time); throughput from the first post to the
  last mail acknowledged, and the p50/p99 from a post's acknowledgement to its turn's
  completion (the event's own timestamp, read back from the broker's event stream);
- 1,000 seats' mailboxes (2,000 `ensure_subscription`s: inbox and control) on a fresh solo broker with
  `sync: always`, the way the node creates them (four in flight per stream), beside raw
  nats-py consumer creates of the same configuration one by one and sixteen in flight.

Run: .venv/bin/python benchmarks/fleet.py
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)  # not benchmarks/: its queue.py must not shadow the standard library's

import asyncio
import json
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

import nats  # noqa: E402

from engine.queue import topics  # noqa: E402
from engine.node.applier import MAILBOX_CREATES_PER_STREAM  # noqa: E402
from engine.queue.broker import EmbeddedBroker  # noqa: E402
from engine.queue.dial import Dial  # noqa: E402
from engine.queue.jetstream import JetStreamQueue  # noqa: E402
from engine.queue.jetstream_provision import mailbox_config  # noqa: E402
from tests.chaos.scenario import Burst, StreamReader, company, handles, member_dial  # noqa: E402
from tests.fleet.fleet import EmbeddedFleet, Fleet  # noqa: E402
from tests.node.harness import eventually  # noqa: E402

TASKS = 600
SEATS = 12
PROVISION_RUNS = 3
SEAT_MAILBOXES = 1000  # seats: each has two mailboxes (inbox and control), so 2,000 consumers


class OneNode(Fleet):
    """One node on its own solo embedded broker: the same-run baseline."""

    kind = "solo"

    def __init__(self, home: Path) -> None:
        super().__init__(home, 1)

    def stream_block(self, index: int) -> str:
        return f'{{type: embedded, store_dir: "{self.nodes[index].home / "stream"}"}}'


class SoloReader(StreamReader):
    def _dial(self):
        return member_dial(self.fleet.nodes[0])


async def _settled(url: str, token: str | None) -> bool:
    """Every mailbox on CREWLET_AGENT has nothing waiting and nothing unacknowledged."""
    nc = await nats.connect(servers=url.split(","), token=token, connect_timeout=5)
    try:
        js = nc.jetstream(timeout=10)
        for info in await js.consumers_info("CREWLET_AGENT"):
            if info.num_pending or info.num_ack_pending:
                return False
        return True
    finally:
        await nc.close()


def run_load(fleet: Fleet, reader: StreamReader) -> dict:
    fleet.start(company(SEATS, delay=0.0))
    fleet.wait_ready(240)
    eventually(lambda: set().union(*(fleet.seats(n) for n in fleet.nodes)) == set(handles(SEATS)), 120, "every seat placed")
    burst = Burst(fleet, handles(SEATS))
    acked_at: dict[str, float] = {}
    lock = threading.Lock()
    nodes = fleet.nodes

    def post(n: int) -> None:
        node = nodes[n % len(nodes)]
        event_id = burst.post(node, handles(SEATS)[n % SEATS], f"task {n}")
        if event_id:
            with lock:
                acked_at[event_id] = time.time()

    began = time.time()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(post, range(TASKS)))
    url, token = reader._dial()

    def done():
        ledger = reader.read()
        return ledger if all(ledger.worked(t) >= 1 for t in acked_at) and asyncio.run(_settled(url, token)) else None

    ledger = eventually(done, 300, "every task worked and acknowledged", interval=0.5)
    ended = time.time()
    latencies = []
    for trigger, at in acked_at.items():
        finished = min(datetime.fromisoformat(c["time"].replace("Z", "+00:00")).timestamp()
                       for c in ledger.completed[trigger] if c["outcome"] == "completed")
        latencies.append(max(0.0, finished - at))
    latencies.sort()
    return {"tasks": len(acked_at), "throughput": len(acked_at) / (ended - began),
            "p50": statistics.median(latencies), "p99": latencies[int(len(latencies) * 0.99) - 1]}


async def provision(inflight_per_stream: int | None, raw_inflight: int | None) -> float:
    """Seconds for SEAT_MAILBOXES seats' mailboxes on a fresh solo broker: through the queue, with
    `inflight_per_stream` per stream as the node does, or raw nats-py creates `raw_inflight` at a time."""
    with tempfile.TemporaryDirectory() as store:
        broker = EmbeddedBroker(store_dir=store, server_name="bench", sync="always")
        await broker.start()
        queue = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="bench")
        pairs = [pair for i in range(SEAT_MAILBOXES) for pair in (
            (topics.agent_inbox(f"a{i:04d}"), topics.inbox_group(f"a{i:04d}")),
            (topics.agent_control(f"a{i:04d}"), topics.control_group(f"a{i:04d}")))]
        try:
            began = time.monotonic()
            if inflight_per_stream is not None:
                gate = asyncio.Semaphore(inflight_per_stream)

                async def ensure(pair):
                    async with gate:
                        await queue.ensure_subscription(*pair)

                await asyncio.gather(*(ensure(p) for p in pairs))
            else:
                gate = asyncio.Semaphore(raw_inflight)

                async def create(pair):
                    config = mailbox_config(*pair, ack_wait_seconds=1800, max_deliveries=25)
                    subject = f"$JS.API.CONSUMER.CREATE.CREWLET_AGENT.{config['durable_name']}.{pair[0]}"
                    body = json.dumps({"stream_name": "CREWLET_AGENT", "config": config, "action": "create"}).encode()
                    async with gate:
                        reply = await queue.nc.request(subject, body, timeout=60)
                    assert b'"error"' not in reply.data, reply.data

                await asyncio.gather(*(create(p) for p in pairs))
            return time.monotonic() - began
        finally:
            await queue.close()
            await broker.stop()


def main() -> None:
    results = {}
    with tempfile.TemporaryDirectory() as home:
        for name, fleet, reader in (("three nodes, 3-member cluster (R3)", None, None), ("one node, solo broker", None, None)):
            if name.startswith("three"):
                fleet = EmbeddedFleet(Path(home) / "fleet", ttl=None)
                reader = StreamReader(fleet)
            else:
                fleet = OneNode(Path(home) / "one")
                fleet.ttl = None
                reader = SoloReader(fleet)
            try:
                results[name] = run_load(fleet, reader)
            finally:
                fleet.stop()
    mailboxes = {
        "node's way (4 in flight per stream)": [],
        "baseline: raw nats-py, one by one": [],
        "baseline: raw nats-py, 16 in flight": [],
    }
    for _ in range(PROVISION_RUNS):  # interleaved, so a busy moment of the host falls on each alike
        mailboxes["node's way (4 in flight per stream)"].append(asyncio.run(provision(MAILBOX_CREATES_PER_STREAM, None)))
        mailboxes["baseline: raw nats-py, one by one"].append(asyncio.run(provision(None, 1)))
        mailboxes["baseline: raw nats-py, 16 in flight"].append(asyncio.run(provision(None, 16)))
    print(f"benchmarks/fleet.py ({TASKS} tasks over {SEATS} seats, scripted provider; this machine: {os.cpu_count()} cores)")
    print("  publish -> handled -> acked              tasks/s    p50 s    p99 s")
    for name, r in results.items():
        print(f"    {name:<38} {r['throughput']:7.1f}  {r['p50']:7.3f}  {r['p99']:7.3f}")
    print(f"  {SEAT_MAILBOXES:,} seats' mailboxes ({2 * SEAT_MAILBOXES:,} consumers), fresh solo broker, sync: always")
    for name, runs in mailboxes.items():
        print(f"    {name:<38} {statistics.median(runs):6.2f} s  (median of {PROVISION_RUNS}: {', '.join(f'{r:.2f}' for r in runs)})")


if __name__ == "__main__":
    main()
