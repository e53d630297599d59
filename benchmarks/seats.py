"""Seat-host figures on the embedded broker, printed (not a test).

    .venv/bin/python benchmarks/seats.py [--quick]

10 agent seats, 100 conversations (10 a seat), 2,000 messages published as fast as possible
while the scripted provider takes 200 ms a turn, through the node's own parts in one process:
the embedded nats-server, the JetStream queue, the in-process coordination store, the seat
runtime with its real turn engine and token budgets. For each setting of the two coalescing
knobs it prints
  - turns, and turns per conversation (seed 000: "an idle-agent burst worst-cases at two
    turns ... never N"; a drain is capped at max_batch, so 200 messages a seat need at least
    200 / max_batch drains);
  - messages lost (published, never worked) and duplicate turns (a message worked twice): 0;
  - the host's own overhead per turn -- the handler's time less the turn and the wait for a
    concurrency slot: ledger reads and writes, the merge, the budget check (target p50 < 5 ms);
    and the turn engine's own time beside its provider (its events and budget charges);
beside a baseline measured in the same run: the raw `subscribe_batch` drain of the same
messages with a handler that does nothing (per partition, and per message).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

# The project root rather than this folder, whose queue.py would stand in for the stdlib's.
sys.path[0] = str(Path(__file__).resolve().parent.parent)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crewlet_site.settings")

import django  # noqa: E402

django.setup()

import yaml  # noqa: E402

from engine.config.company import parse_company  # noqa: E402
from engine.coord.local import LocalCoord  # noqa: E402
from engine.queue import topics  # noqa: E402
from engine.queue.broker import EmbeddedBroker  # noqa: E402
from engine.queue.contract import BatchOptions, Tuning  # noqa: E402
from engine.queue.jetstream import JetStreamQueue  # noqa: E402
from engine.queue.jetstream_connection import Dial  # noqa: E402
from engine.node.server import loop_factory  # noqa: E402
from events.envelope import new  # noqa: E402
from events.tracing import trace_of  # noqa: E402
from events.types.notification import ExternalNotification  # noqa: E402
from seats.runtime import SeatRuntime  # noqa: E402

SEATS = 10
PROVIDER_SECONDS = 0.2


def company(window: int, max_batch: int):
    seats = [{"handle": f"seat{i}", "kind": "agent", "role": "engineer"} for i in range(SEATS)]
    return parse_company(yaml.safe_dump({
        "name": "bench", "org": {"seats": seats},
        "providers": {"llm": [{"name": "local", "kind": "scripted", "delay_seconds": PROVIDER_SECONDS, "reply": "ok"}]},
        "notification_coalesce_window_seconds": window, "notification_coalesce_max_batch": max_batch,
    }), env={})


def message(seat: int, conversation: int, i: int):
    key = f"slack:C{conversation}:1"
    return new(ExternalNotification(agent_handle=f"seat{seat}", body=f"message {i} of {key}", sender="dana",
                                    conversation_identity=key), trace_of(), source="slack", payload={"partition_key": key})


def plan(conversations: int, messages: int) -> list[tuple[int, list]]:
    """Per conversation (seat, its messages); conversation c belongs to seat c % SEATS."""
    per = messages // conversations
    return [(c % SEATS, [message(c % SEATS, c, i) for i in range(per)]) for c in range(conversations)]


class Recorded:
    """The real turn engine, timed: how long each run took, and what it worked."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.runs: list[tuple[object, object, float]] = []

    async def run(self, request):
        began = time.perf_counter()
        result = await self.engine.run(request)
        self.runs.append((request, result, time.perf_counter() - began))
        return result


async def _until(predicate, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached")
        await asyncio.sleep(0.02)


async def pending_total(q) -> int:
    return sum([await q.pending(topics.agent_inbox(f"seat{i}"), topics.inbox_group(f"seat{i}")) for i in range(SEATS)])


async def seats_run(q, work: list[tuple[int, list]], window: int, max_batch: int) -> dict:
    node = SimpleNamespace(queue=q, coord=LocalCoord(), company=company(window, max_batch), node_id="bench",
                           cfg=SimpleNamespace(node=SimpleNamespace(max_concurrent=32)), leases=None,
                           timings=SimpleNamespace(sweep_seconds=5.0), services=[], state=SimpleNamespace(tool_servers=()))
    for seat in node.company.agent_seats():
        await q.ensure_subscription(topics.agent_inbox(seat.handle), topics.inbox_group(seat.handle))
    runtime = SeatRuntime(node)
    runtime.turns = recorded = Recorded(runtime.turns)
    await runtime.start()
    for seat in node.company.agent_seats():
        await runtime.on_seat_acquired(seat.handle, None)

    async def publisher(seat: int, events: list) -> None:
        for event in events:
            await q.publish(topics.agent_inbox(f"seat{seat}"), event)

    began = time.perf_counter()
    await asyncio.gather(*(publisher(seat, events) for seat, events in work))
    published_in = time.perf_counter() - began

    async def drained() -> bool:
        return sum(len(r.constituents) for r, res, _ in recorded.runs if res.outcome == "completed") >= \
            sum(len(e) for _, e in work) and await pending_total(q) == 0

    await _until(drained)
    elapsed = time.perf_counter() - began
    overhead = [ms for host in runtime.hosts.values() for ms in host.overhead_ms]
    await runtime.stop(cut=False)
    for seat in node.company.agent_seats():
        await q.delete_subscription(topics.agent_inbox(seat.handle), topics.inbox_group(seat.handle))
    worked = Counter(str(e.id) for r, res, _ in recorded.runs if res.outcome == "completed" for e in r.constituents)
    sent = {str(e.id) for _, events in work for e in events}
    per_conversation = Counter(str(r.trigger.get("conversation_identity")) for r, _, _ in recorded.runs)
    engine_ms = [(secs - PROVIDER_SECONDS * res.rounds) * 1000 for _, res, secs in recorded.runs]
    return {
        "turns": len(recorded.runs), "per_conv": per_conversation, "lost": len(sent - set(worked)),
        "duplicates": sum(n - 1 for n in worked.values() if n > 1), "overhead": sorted(overhead),
        "engine": sorted(engine_ms), "elapsed": elapsed, "published_in": published_in, "messages": len(sent),
    }


async def solo_run(q, turns: int) -> dict:
    """Light load: one seat, one message at a time, each published once the previous turn was
    acked -- the host's overhead with nothing else on the event loop."""
    node = SimpleNamespace(queue=q, coord=LocalCoord(), company=company(0, 20), node_id="bench",
                           cfg=SimpleNamespace(node=SimpleNamespace(max_concurrent=32)), leases=None,
                           timings=SimpleNamespace(sweep_seconds=5.0), services=[], state=SimpleNamespace(tool_servers=()))
    inbox, group = topics.agent_inbox("seat0"), topics.inbox_group("seat0")
    await q.ensure_subscription(inbox, group)
    runtime = SeatRuntime(node)
    runtime.turns = recorded = Recorded(runtime.turns)
    await runtime.start()
    await runtime.on_seat_acquired("seat0", None)
    for i in range(turns):
        await q.publish(inbox, message(0, i, 0))

        async def acked(i: int = i) -> bool:
            return len(recorded.runs) > i and await q.pending(inbox, group) == 0

        await _until(acked)
    overhead = sorted(runtime.hosts["seat0"].overhead_ms)
    engine_ms = sorted((secs - PROVIDER_SECONDS * res.rounds) * 1000 for _, res, secs in recorded.runs)
    await runtime.stop(cut=False)
    await q.delete_subscription(inbox, group)
    return {"overhead": overhead, "engine": engine_ms}


async def baseline_run(q, work: list[tuple[int, list]]) -> dict:
    """The same messages through subscribe_batch with a handler that does nothing."""
    inboxes = [(topics.agent_inbox(f"base{i}"), topics.inbox_group(f"base{i}")) for i in range(SEATS)]
    for inbox, group in inboxes:
        await q.ensure_subscription(inbox, group)
    for seat, events in work:
        for event in events:
            await q.publish(inboxes[seat][0], event)
    partitions, messages = 0, 0

    async def handler(batch):
        nonlocal partitions, messages
        partitions += 1
        messages += len(batch.deliveries)

    began = time.perf_counter()
    for inbox, group in inboxes:
        await q.subscribe_batch(inbox, group, BatchOptions(max_batch=20), handler)

    async def drained() -> bool:
        return messages >= sum(len(e) for _, e in work) and \
            sum([await q.pending(i, g) for i, g in inboxes]) == 0

    await _until(drained)
    elapsed = time.perf_counter() - began
    for inbox, group in inboxes:
        await q.detach(inbox, group)
        await q.delete_subscription(inbox, group)
    # Ten seats drain in parallel: a partition's cost is the time one seat spends on it.
    return {"per_partition_ms": elapsed * SEATS / partitions * 1000, "per_message_ms": elapsed * SEATS / messages * 1000,
            "partitions": partitions, "elapsed": elapsed}


def pct(values: list[float], q: float) -> float:
    return values[min(int(len(values) * q), len(values) - 1)] if values else float("nan")


def report(label: str, r: dict, conversations: int) -> None:
    counts = sorted(r["per_conv"].values())
    print(f"\n== {label}")
    print(f"  {r['messages']} messages published in {r['published_in']:.2f} s; all worked and acked in {r['elapsed']:.2f} s")
    print(f"  turns {r['turns']}  ({r['turns'] / conversations:.2f} a conversation; min {counts[0]}, "
          f"median {statistics.median(counts):.0f}, max {counts[-1]}; one per message would be {r['messages']})")
    print(f"  messages lost {r['lost']}   duplicate turns {r['duplicates']}")
    print(f"  host overhead per turn, 10 seats sharing one event loop   p50 {pct(r['overhead'], 0.5):.2f} ms   "
          f"p99 {pct(r['overhead'], 0.99):.2f} ms")
    print(f"  turn engine beside its provider   p50 {pct(r['engine'], 0.5):.2f} ms   p99 {pct(r['engine'], 0.99):.2f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 messages over 20 conversations (a smoke run)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    conversations, messages = (20, 200) if args.quick else (100, 2000)
    print(f"seats benchmark: {SEATS} seats, {conversations} conversations, {messages} messages, "
          f"scripted provider {PROVIDER_SECONDS * 1000:.0f} ms a turn, embedded broker (stream.sync: always)")
    with tempfile.TemporaryDirectory(prefix="crewlet-bench-") as store:
        broker = EmbeddedBroker(store_dir=store, server_name="bench")
        await broker.start()
        q = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="bench", tuning=Tuning())
        try:
            base = await baseline_run(q, plan(conversations, messages))
            print("\n== baseline: raw subscribe_batch drain, no turns (max_batch 20)")
            print(f"  {base['partitions']} partitions in {base['elapsed']:.2f} s: {base['per_partition_ms']:.2f} ms a "
                  f"partition, {base['per_message_ms']:.2f} ms a message, per seat")
            solo = await solo_run(q, 20 if args.quick else 50)
            print("\n== light load: one seat, one message at a time")
            print(f"  host overhead per turn   p50 {pct(solo['overhead'], 0.5):.2f} ms   "
                  f"p99 {pct(solo['overhead'], 0.99):.2f} ms   (target p50 < 5 ms)")
            print(f"  turn engine beside its provider   p50 {pct(solo['engine'], 0.5):.2f} ms   "
                  f"p99 {pct(solo['engine'], 0.99):.2f} ms")
            for window, max_batch in ((0, 20), (0, 100), (1, 100)):
                result = await seats_run(q, plan(conversations, messages), window, max_batch)
                report(f"notification_coalesce_window_seconds {window}, notification_coalesce_max_batch {max_batch}",
                       result, conversations)
        finally:
            await q.close()
            await broker.stop()


if __name__ == "__main__":
    # The node's own event loop (uvloop), as `crewlet_node` runs it.
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(main())
