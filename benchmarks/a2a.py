"""A2A figures on the embedded broker, printed (not a test).

    .venv/bin/python benchmarks/a2a.py [--quick]

Ask-to-answer-wake latency for an instant answering model: alice asks bob (`a2a.service.ask`,
what the a2a_ask tool calls); bob's seat host, with the real turn engine and the scripted
provider at `delay_seconds: 0`, runs the turn and answers; the time is taken when the answer
wake is delivered on alice's inbox. p50 and p99, once over the in-process coordination twin
(`coordination.type: local`) and once over NATS KV on the same broker (`embedded-kv`, what a
fleet runs), each beside a baseline measured in the same run: the raw two publishes the
exchange rides on -- an event published to bob's inbox, drained by `subscribe_batch` (as a
seat host drains it) with a handler that publishes one event to alice's inbox, delivered to a
plain subscriber there. Target: under 3x the raw round trip. Each ask is asked once the one
before has settled (its turn returned and the exchange's last record was acknowledged): the
answer leaves from the turn's last round, ahead of the turn's own closing records, so an ask
sent the instant the last answer arrived meets those records still on their way. That figure
is printed too, as "back to back". Two of an ask's parts are printed beside it: the ask call itself, and the answering turn engine's own time (its records and
budget charges, with a model that answers at once); then where an ask's time goes, step by
step, each the median over the asks, from when the broker acknowledged each publish (a publish
listener) and when the turn engine started and returned. Last, what bounds the ratio: this
process's CPU time per ask beside its CPU time per raw round trip, and the publishes on the
queue (events the broker stored and acknowledged) each makes.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The project root rather than this folder, whose queue.py would stand in for the stdlib's.
sys.path[0] = str(Path(__file__).resolve().parent.parent)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crewlet_site.settings")

import django  # noqa: E402

django.setup()

import yaml  # noqa: E402

from a2a import service as a2a  # noqa: E402
from engine.config.company import parse_company  # noqa: E402
from engine.coord.leases import LeaseManager  # noqa: E402
from engine.coord.local import LocalCoord  # noqa: E402
from engine.coord.natskv import NatsKVCoord  # noqa: E402
from engine.node.server import loop_factory  # noqa: E402
from engine.queue import topics  # noqa: E402
from engine.queue.broker import EmbeddedBroker  # noqa: E402
from engine.queue.contract import BatchOptions, Outcome, Tuning  # noqa: E402
from engine.queue.jetstream import JetStreamQueue  # noqa: E402
from engine.queue.jetstream_connection import Dial  # noqa: E402
from events.envelope import new  # noqa: E402
from events.tracing import trace_of  # noqa: E402
from events.types.task import TaskAssigned  # noqa: E402
from seats.budgets import Budgets  # noqa: E402
from seats.pauses import PauseBook  # noqa: E402
from seats.runtime import SeatRuntime  # noqa: E402

COMPANY = {"name": "bench", "org": {"seats": [{"handle": "alice", "kind": "agent"}, {"handle": "bob", "kind": "agent"}]},
           "providers": {"llm": [{"name": "local", "kind": "scripted", "delay_seconds": 0, "reply": "ok: {trigger_summary}"}]}}


@dataclass
class BenchNode:
    """The SeatsNode (and A2ANode) a seat runtime and the A2A service are handed."""

    queue: Any
    coord: Any
    company: Any
    node_id: str = "bench"
    max_concurrent: int = 8
    sweep_seconds: float = 5.0
    stopping: bool = False
    seat_runtime: Any = None

    def __post_init__(self) -> None:
        self.leases = LeaseManager(self.coord, self.node_id, ttl=45)
        self.pauses = PauseBook(self.coord)
        self.budgets = Budgets(self.coord)


class Arrivals:
    """A plain subscriber on an inbox: when each event id arrived."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self.changed = asyncio.Event()

    async def __call__(self, delivery) -> Outcome:
        self.at[str(delivery.event.id)] = time.perf_counter()
        self.changed.set()
        return Outcome.ACK

    async def wait_for(self, count: int) -> None:
        while len(self.at) < count:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 30)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)]


class Counted:
    """The publishes this client made, and the process's CPU time, while `on` (a publish
    listener stays for the client's life, so it is switched rather than removed)."""

    def __init__(self) -> None:
        self.publishes = 0
        self.cpu_s = 0.0
        self.on = False

    def __call__(self, topic: str, event) -> None:
        if self.on:
            self.publishes += 1

    def start(self) -> None:
        self.publishes, self.on, self._began = 0, True, time.process_time()

    def stop(self) -> None:
        self.on, self.cpu_s = False, time.process_time() - self._began


async def raw_round_trips(q, rounds: int, counted: Counted | None = None) -> list[float]:
    """The two publishes an ask and its answer ride on, with nothing between them."""
    there = (topics.agent_inbox("rawbob"), topics.inbox_group("rawbob"))
    back = (topics.agent_inbox("rawalice"), topics.inbox_group("rawalice"))
    for topic, group in (there, back):
        await q.ensure_subscription(topic, group)
    arrivals = Arrivals()
    await q.subscribe(*back, arrivals)

    async def forward(batch) -> Outcome:
        for d in batch.deliveries:
            await q.publish(back[0], new(TaskAssigned(agent_handle="rawalice", task=str(d.event.id)), trace_of()))
        return Outcome.ACK

    await q.subscribe_batch(*there, BatchOptions(), forward)
    out = []
    if counted is not None:
        counted.start()
    for i in range(rounds):
        began = time.perf_counter()
        await q.publish(there[0], new(TaskAssigned(agent_handle="rawbob", task=str(i)), trace_of()))
        await arrivals.wait_for(i + 1)
        out.append((max(arrivals.at.values()) - began) * 1000)
    if counted is not None:
        counted.stop()
    for topic, group in (there, back):
        await q.detach(topic, group)
        await q.delete_subscription(topic, group)
    return out


class Timed:
    """The real turn engine, timed."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.ms: list[float] = []
        self.spans: list[tuple[float, float]] = []
        self.changed = asyncio.Event()

    async def run(self, request):
        began = time.perf_counter()
        try:
            return await self.engine.run(request)
        finally:
            ended = time.perf_counter()
            self.ms.append((ended - began) * 1000)
            self.spans.append((began, ended))
            self.changed.set()


class Acks:
    """When the broker acknowledged each publish of this client, by event type (a publish
    listener: it runs once the ack is in)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str]] = []
        self.on = False
        self.changed = asyncio.Event()

    def __call__(self, topic: str, event) -> None:
        if self.on:
            self.seen.append((time.perf_counter(), event.type))
            self.changed.set()

    def after(self, event_type: str, moment: float) -> float:
        return next(t for t, kind in self.seen if kind == event_type and t >= moment)

    def has(self, event_type: str, moment: float) -> bool:
        return any(kind == event_type and t >= moment for t, kind in reversed(self.seen[-16:]))


async def until(predicate, *signals: asyncio.Event) -> None:
    """Wait, without spinning, until predicate() holds; each signal is set when it may have changed."""
    while not predicate():
        for signal in signals:
            signal.clear()
        waiting = [asyncio.ensure_future(s.wait()) for s in signals]
        await asyncio.wait(waiting, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiting:
            waiter.cancel()


STEPS = ("the ask: channel written, wake acknowledged", "bob's host: fetch, ledger read, turn set up",
         "opening records acknowledged (memory read beside)", "the round: model, charge, answer's wake to alice")


def steps(acks: Acks, began: list[float], arrived: list[float], turns: list[tuple[float, float]]) -> dict[str, list[float]]:
    """Each ask's time cut where its wake and the turn's opening records were acknowledged and
    where the turn began. The answer goes out from the turn's last round, beside its phase and
    end records: alice may be woken before they are acknowledged and the turn returns."""
    out: dict[str, list[float]] = {step: [] for step in STEPS}
    for start, (turn_began, _), end in zip(began, turns, arrived, strict=True):
        wake = acks.after("a2a_request", start)
        opened = acks.after("prompt.size", turn_began)
        marks = (start, wake, turn_began, opened, end)
        for step, (a, b) in zip(STEPS, itertools.pairwise(marks), strict=True):
            out[step].append((b - a) * 1000)
    return out


async def asks(q, coord, rounds: int, parts: dict | None = None, *, settled: bool = True) -> list[float]:
    """Ask -> the answering turn -> the answer wake on alice's inbox, one ask at a time; `parts`
    collects the ask call's own time and the answering turn engine's. `settled`: each ask waits
    for the one before to settle (its turn returned, the exchange's last record acknowledged),
    so it is timed on a node doing nothing else; else each goes as soon as the last answer
    arrived, meeting the records that answer's turn still has on their way."""
    node = BenchNode(queue=q, coord=coord, company=parse_company(yaml.safe_dump(COMPANY), env={}))
    for handle in ("alice", "bob"):
        await q.ensure_subscription(topics.agent_inbox(handle), topics.inbox_group(handle))
    runtime = SeatRuntime(node)
    runtime.turns = timed = Timed(runtime.turns)
    node.seat_runtime = runtime
    await runtime.start()
    await runtime.on_seat_acquired("bob", None)
    arrivals = Arrivals()
    await q.subscribe(topics.agent_inbox("alice"), topics.inbox_group("alice"), arrivals)  # alice's inbox, drained plainly
    out, began_at, arrived_at = [], [], []
    acks = Acks()
    q.add_publish_listener(acks)  # a listener stays for the client's life: off again after these asks
    acks.on = True
    cpu_began = time.process_time()
    for i in range(rounds):
        began = time.perf_counter()
        outcome = await a2a.ask(node, asker="alice", target="bob", brief=f"question {i}", depth=0, trace=trace_of())
        asked = time.perf_counter()
        assert outcome.ok, outcome.text
        await arrivals.wait_for(i + 1)
        arrived = max(arrivals.at.values())
        out.append((arrived - began) * 1000)
        if settled:
            await until(lambda i=i, began=began: len(timed.spans) > i and acks.has("a2a_channel_closed", began),
                        timed.changed, acks.changed)
        began_at.append(began)
        arrived_at.append(arrived)
        if parts is not None:
            parts.setdefault("ask", []).append((asked - began) * 1000)
    await until(lambda: len(timed.spans) >= rounds, timed.changed)  # the last turn's end may trail its answer
    acks.on = False
    if parts is not None:
        parts["cpu_ms"] = (time.process_time() - cpu_began) * 1000 / rounds
        parts["publishes"] = len(acks.seen) / rounds
        parts["turn"] = timed.ms
        parts["steps"] = steps(acks, began_at, arrived_at, timed.spans)
    await runtime.stop(cut=False)
    await q.detach(topics.agent_inbox("alice"), topics.inbox_group("alice"))
    for handle in ("alice", "bob"):
        await q.delete_subscription(topics.agent_inbox(handle), topics.inbox_group(handle))
    return out


def line(label: str, values: list[float]) -> str:
    return f"  {label:<44} p50 {pct(values, 0.5):6.2f} ms   p99 {pct(values, 0.99):6.2f} ms   mean {statistics.mean(values):6.2f} ms"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 asks a store (a smoke run)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    rounds = 50 if args.quick else 300
    print(f"a2a benchmark: {rounds} asks a store, one at a time; scripted provider at delay 0; embedded broker")
    with tempfile.TemporaryDirectory(prefix="crewlet-bench-") as store:
        broker = EmbeddedBroker(store_dir=store, server_name="bench")
        await broker.start()
        q = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="bench", tuning=Tuning())
        kv = await NatsKVCoord.connect(broker.client_url, broker.token, name="bench-coord")
        try:
            counted = Counted()
            q.add_publish_listener(counted)
            await raw_round_trips(q, 20)  # warm the streams and the loop
            for label, coord in (("coordination local (the twin)", LocalCoord()), ("coordination embedded-kv", kv)):
                await asks(q, coord, 10)  # warm: buckets, consumers
                raw = await raw_round_trips(q, rounds, counted)
                parts: dict = {}
                measured = await asks(q, coord, rounds, parts)
                back_to_back = await asks(q, coord, rounds, settled=False)
                ratio = pct(measured, 0.5) / pct(raw, 0.5)
                print(f"\n== {label}")
                print(line("baseline: raw two publishes, round trip", raw))
                print(line("ask -> answering turn -> answer wake", measured))
                print(line("  of which the ask call (channel, wake, row)", parts["ask"]))
                print(line("  of which the answering turn engine", parts["turn"]))
                print(line("asked back to back (no settling between)", back_to_back))
                print(f"  ratio at p50: {ratio:.2f}x the raw round trip (target under 3x)"
                      f"; at p99: {pct(measured, 0.99) / pct(raw, 0.99):.2f}x"
                      f"; back to back at p50: {pct(back_to_back, 0.5) / pct(raw, 0.5):.2f}x")
                print(f"  this process's CPU per ask: {parts['cpu_ms']:.2f} ms over {parts['publishes']:.0f} publishes on the queue; "
                      f"per raw round trip: {counted.cpu_s * 1000 / rounds:.2f} ms over {counted.publishes / rounds:.0f}")
                print("  where an ask's time goes (medians):")
                for step, values in parts["steps"].items():
                    print(f"    {step:<52} {statistics.median(values):6.2f} ms")
        finally:
            await kv.close()
            await q.close()
            await broker.stop()


if __name__ == "__main__":
    # The node's own event loop (uvloop), as `crewlet_node` runs it.
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(main())
