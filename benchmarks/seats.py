"""Seat-host figures on the embedded broker, printed (not a test).

    .venv/bin/python benchmarks/seats.py [--quick]

10 agent seats, 100 conversations (10 a seat), 2,000 messages published as fast as possible
while the scripted provider takes 200 ms a turn, through the node's own parts in one process:
the embedded nats-server, the JetStream queue, the in-process coordination store, the seat
runtime (on a `seats.node.SeatsNode` of the shape the tests use, tests/seats/hosting.py) with
its real turn engine, ledger, token budgets and telemetry. For each setting of the two
coalescing knobs it prints
  - turns, and turns per conversation (seed 000: "an idle-agent burst worst-cases at two
    turns ... never N"; a drain is capped at max_batch, so 200 messages a seat need at least
    200 / max_batch drains);
  - messages lost (published, never worked) and duplicate turns (a message worked twice): 0;
  - the host's overhead per turn counted whole: from the moment the turn's messages were in
    hand (the drain fetched and collected, or the seat's previous partition acked, when they
    waited behind it in one drain) to the moment their ack was sent, less the time inside the
    model provider -- the drain's decode and partition, the ledger, the budget, the merge,
    the turn engine's own work and the events it awaits, the concurrency gate, the settle and
    the ack;
beside a like-for-like baseline measured in the same run: the same messages through the same
queue's `subscribe_batch`, whose handler calls the same scripted provider once per partition
and acks, timed the same way -- what the queue itself costs between the fetch and the ack.
The difference of the two is what the seat host adds.
"""
from __future__ import annotations

import argparse
import asyncio
import contextvars
import logging
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# The project root rather than this folder, whose queue.py would stand in for the stdlib's.
sys.path[0] = str(Path(__file__).resolve().parent.parent)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crewlet_site.settings")

import django  # noqa: E402

django.setup()

import yaml  # noqa: E402
from nats.aio.msg import Msg  # noqa: E402

from engine.config.company import parse_company  # noqa: E402
from engine.coord.local import LocalCoord  # noqa: E402
from engine.node.server import loop_factory  # noqa: E402
from engine.queue import jetstream_consume, topics  # noqa: E402
from engine.queue.broker import EmbeddedBroker  # noqa: E402
from engine.queue.contract import BatchOptions, Outcome, Tuning  # noqa: E402
from engine.queue.jetstream import JetStreamQueue  # noqa: E402
from engine.queue.jetstream_connection import Dial  # noqa: E402
from events.envelope import new  # noqa: E402
from events.tracing import trace_of  # noqa: E402
from events.types.notification import ExternalNotification  # noqa: E402
from seats.providers.scripted import ScriptedProvider  # noqa: E402
from seats.runtime import SeatRuntime  # noqa: E402
from tests.seats.hosting import FakeNode  # noqa: E402

SEATS = 10
PROVIDER_SECONDS = 0.2
SCRIPTED = {"name": "local", "kind": "scripted", "delay_seconds": PROVIDER_SECONDS, "reply": "ok"}


# -- the clocks: when each message was fetched and acked, how long each handler spent in the provider
@dataclass
class Marks:
    fetched: dict[str, float]          # event id -> when the attachment took it in
    acked: dict[int, float]            # stream sequence -> when its ack was sent
    seq_of: dict[str, int]             # event id -> stream sequence


MARKS = Marks({}, {}, {})
IN_PROVIDER: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("in_provider", default=None)


def instrument() -> None:
    """Wrap the three points the figure is taken between (this process only)."""
    deliver, ack, complete = jetstream_consume.Attachment.deliver, Msg.ack, ScriptedProvider.complete

    async def timed_deliver(self, msg):
        # Called for each message of a drain once the drain is collected (after any linger,
        # which is the knob's wait, not overhead): the message is in hand from here.
        at = time.perf_counter()
        delivery = await deliver(self, msg)
        if delivery is not None:
            key = str(delivery.event.id)
            MARKS.fetched[key] = at  # a redelivery is in hand from its latest fetch
            MARKS.seq_of[key] = msg.metadata.sequence.stream
        return delivery

    async def timed_ack(self):
        await ack(self)
        MARKS.acked[self.metadata.sequence.stream] = time.perf_counter()

    async def timed_complete(self, *args, **kwargs):
        began = time.perf_counter()
        try:
            return await complete(self, *args, **kwargs)
        finally:
            spent = IN_PROVIDER.get()
            if spent is not None:
                spent[0] += time.perf_counter() - began

    jetstream_consume.Attachment.deliver = timed_deliver
    Msg.ack = timed_ack
    ScriptedProvider.complete = timed_complete


@dataclass
class Handled:
    """One handler call: its messages, when it was called, how long it spent in the provider."""

    topic: str
    ids: list[str]
    called: float
    provider: float


class TimedQueue:
    """The queue as the host sees it, with every batch handler timed; everything else passes."""

    def __init__(self, queue) -> None:
        self._queue = queue
        self.handled: list[Handled] = []

    def __getattr__(self, name):
        return getattr(self._queue, name)

    async def subscribe_batch(self, topic, group, options, handler):
        async def timed(batch):
            called, spent = time.perf_counter(), [0.0]
            IN_PROVIDER.set(spent)
            try:
                return await handler(batch)
            finally:
                IN_PROVIDER.set(None)
                self.handled.append(Handled(topic, [str(d.event.id) for d in batch.deliveries], called, spent[0]))

        return await self._queue.subscribe_batch(topic, group, options, timed)


def whole_overhead_ms(handled: list[Handled]) -> list[float]:
    """Per handler call that acked: fetch (or the seat's previous ack) to ack, less the provider."""
    out = []
    last_ack: dict[str, float] = {}
    for h in sorted(handled, key=lambda h: h.called):
        acks = [MARKS.acked.get(MARKS.seq_of.get(i, -1)) for i in h.ids]
        if not h.ids or any(a is None for a in acks):
            continue  # deferred or handed back: no ack to time
        fetched = min(MARKS.fetched[i] for i in h.ids)
        begin = max(fetched, last_ack.get(h.topic, 0.0))  # waiting behind its drain's previous partition is not overhead
        end = max(acks)
        last_ack[h.topic] = end
        out.append((end - begin - h.provider) * 1000)
    return sorted(out)


# -- the work --------------------------------------------------------------------------------
def company(window: int, max_batch: int):
    seats = [{"handle": f"seat{i}", "kind": "agent", "role": "engineer"} for i in range(SEATS)]
    return parse_company(yaml.safe_dump({
        "name": "bench", "org": {"seats": seats}, "providers": {"llm": [SCRIPTED]},
        "notification_coalesce_window_seconds": window, "notification_coalesce_max_batch": max_batch,
    }), env={})


def message(seat: int, conversation: int, i: int, prefix: str = "seat"):
    key = f"slack:C{conversation}:1"
    return new(ExternalNotification(agent_handle=f"{prefix}{seat}", body=f"message {i} of {key}", sender="dana",
                                    conversation_identity=key), trace_of(), source="slack", payload={"partition_key": key})


def plan(conversations: int, messages: int, prefix: str = "seat") -> list[tuple[int, list]]:
    """Per conversation (seat, its messages); conversation c belongs to seat c % SEATS."""
    per = messages // conversations
    return [(c % SEATS, [message(c % SEATS, c, i, prefix) for i in range(per)]) for c in range(conversations)]


class Recorded:
    """The real turn engine, recording what each turn worked."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.runs: list[tuple[object, object]] = []

    async def run(self, request):
        result = await self.engine.run(request)
        self.runs.append((request, result))
        return result

    async def close(self) -> None:
        await self.engine.close()


async def _until(predicate, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached")
        await asyncio.sleep(0.02)


async def pending_total(q, prefix: str) -> int:
    return sum([await q.pending(topics.agent_inbox(f"{prefix}{i}"), topics.inbox_group(f"{prefix}{i}")) for i in range(SEATS)])


async def hosted(q, the_company, handles) -> tuple[TimedQueue, SeatRuntime, Recorded]:
    timed = TimedQueue(q)
    node = FakeNode(queue=timed, coord=LocalCoord(), company=the_company, node_id="bench", max_concurrent=32, sweep_seconds=5.0)
    await node.ensure_mailboxes()
    runtime = SeatRuntime(node)
    node.seat_runtime = runtime
    runtime.turns = recorded = Recorded(runtime.turns)
    await runtime.start()
    for handle in handles:
        await runtime.on_seat_acquired(handle, None)
    return timed, runtime, recorded


async def seats_run(q, work: list[tuple[int, list]], window: int, max_batch: int) -> dict:
    the_company = company(window, max_batch)
    timed, runtime, recorded = await hosted(q, the_company, [s.handle for s in the_company.agent_seats()])

    async def publisher(seat: int, events: list) -> None:
        for event in events:
            await q.publish(topics.agent_inbox(f"seat{seat}"), event)

    began = time.perf_counter()
    await asyncio.gather(*(publisher(seat, events) for seat, events in work))
    published_in = time.perf_counter() - began

    async def drained() -> bool:
        return sum(len(r.constituents) for r, res in recorded.runs if res.outcome == "completed") >= \
            sum(len(e) for _, e in work) and await pending_total(q, "seat") == 0

    await _until(drained)
    elapsed = time.perf_counter() - began
    await runtime.stop(cut=False)
    for seat in the_company.agent_seats():
        await q.delete_subscription(topics.agent_inbox(seat.handle), topics.inbox_group(seat.handle))
        await q.delete_subscription(topics.agent_control(seat.handle), topics.control_group(seat.handle))
    worked = Counter(str(e.id) for r, res in recorded.runs if res.outcome == "completed" for e in r.constituents)
    sent = {str(e.id) for _, events in work for e in events}
    per_conversation = Counter(str(r.trigger.get("conversation_identity")) for r, _ in recorded.runs)
    return {
        "turns": len(recorded.runs), "per_conv": per_conversation, "lost": len(sent - set(worked)),
        "duplicates": sum(n - 1 for n in worked.values() if n > 1), "whole": whole_overhead_ms(timed.handled),
        "elapsed": elapsed, "published_in": published_in, "messages": len(sent),
    }


async def solo_run(q, turns: int) -> list[float]:
    """Light load: one seat, one message at a time, each published once the previous turn was
    acked -- the host's whole overhead with nothing else on the event loop."""
    the_company = company(0, 20)
    timed, runtime, recorded = await hosted(q, the_company, ["seat0"])
    inbox, group = topics.agent_inbox("seat0"), topics.inbox_group("seat0")
    for i in range(turns):
        await q.publish(inbox, message(0, i, 0))

        async def acked(i: int = i) -> bool:
            return len(recorded.runs) > i and await q.pending(inbox, group) == 0

        await _until(acked)
    await runtime.stop(cut=False)
    for seat in the_company.agent_seats():
        await q.delete_subscription(topics.agent_inbox(seat.handle), topics.inbox_group(seat.handle))
        await q.delete_subscription(topics.agent_control(seat.handle), topics.control_group(seat.handle))
    return whole_overhead_ms(timed.handled)


class Baseline:
    """The queue alone: `subscribe_batch` whose handler calls the same scripted provider once per
    partition, as a turn of one round does, and acks."""

    def __init__(self, q, seats: int, window: int, max_batch: int) -> None:
        self.q = TimedQueue(q)
        self.inboxes = [(topics.agent_inbox(f"base{i}"), topics.inbox_group(f"base{i}")) for i in range(seats)]
        self.options = BatchOptions(linger_seconds=window, max_batch=max_batch)
        self.provider = ScriptedProvider(company(0, 20).providers.llm[0])
        self.handled_messages = 0

    async def handler(self, batch) -> Outcome:
        await self.provider.complete([{"role": "user", "content": str(batch.deliveries[0].event.get("body"))}], max_tokens=256)
        self.handled_messages += len(batch.deliveries)
        return Outcome.ACK

    async def __aenter__(self) -> "Baseline":
        for inbox, group in self.inboxes:
            await self.q.ensure_subscription(inbox, group)
            await self.q.subscribe_batch(inbox, group, self.options, self.handler)
        return self

    async def __aexit__(self, *exc) -> None:
        for inbox, group in self.inboxes:
            await self.q.detach(inbox, group)
            await self.q.delete_subscription(inbox, group)


async def baseline_run(q, work: list[tuple[int, list]], window: int, max_batch: int) -> dict:
    async with Baseline(q, SEATS, window, max_batch) as base:
        began = time.perf_counter()

        async def publisher(seat: int, events: list) -> None:
            for event in events:
                await q.publish(base.inboxes[seat][0], event)

        await asyncio.gather(*(publisher(seat, events) for seat, events in work))
        total = sum(len(e) for _, e in work)

        async def drained() -> bool:
            return base.handled_messages >= total and await pending_total(q, "base") == 0

        await _until(drained)
        return {"whole": whole_overhead_ms(base.q.handled), "partitions": len(base.q.handled), "elapsed": time.perf_counter() - began}


async def baseline_solo(q, turns: int) -> list[float]:
    async with Baseline(q, 1, 0, 20) as base:
        inbox, group = base.inboxes[0]
        for i in range(turns):
            await q.publish(inbox, message(0, i, 0, "base"))

            async def acked(i: int = i) -> bool:
                return base.handled_messages > i and await q.pending(inbox, group) == 0

            await _until(acked)
        return whole_overhead_ms(base.q.handled)


def pct(values: list[float], q: float) -> float:
    return values[min(int(len(values) * q), len(values) - 1)] if values else float("nan")


def figures(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5):6.2f} ms   p99 {pct(values, 0.99):6.2f} ms   ({len(values)} turns)"


def report(label: str, r: dict, base: dict, conversations: int) -> None:
    counts = sorted(r["per_conv"].values())
    print(f"\n== {label}")
    print(f"  {r['messages']} messages published in {r['published_in']:.2f} s; all worked and acked in {r['elapsed']:.2f} s")
    print(f"  turns {r['turns']}  ({r['turns'] / conversations:.2f} a conversation; min {counts[0]}, "
          f"median {statistics.median(counts):.0f}, max {counts[-1]}; one per message would be {r['messages']})")
    print(f"  messages lost {r['lost']}   duplicate turns {r['duplicates']}")
    print(f"  fetch to ack less the provider, seat host   {figures(r['whole'])}")
    print(f"  baseline, the queue alone (same run)        {figures(base['whole'])}")
    print(f"  the host's share at p50                     {pct(r['whole'], 0.5) - pct(base['whole'], 0.5):6.2f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 messages over 20 conversations (a smoke run)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    instrument()
    conversations, messages = (20, 200) if args.quick else (100, 2000)
    solo_turns = 20 if args.quick else 100
    print(f"seats benchmark: {SEATS} seats, {conversations} conversations, {messages} messages, "
          f"scripted provider {PROVIDER_SECONDS * 1000:.0f} ms a turn, embedded broker (stream.sync: always), "
          f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="crewlet-bench-") as store:
        broker = EmbeddedBroker(store_dir=store, server_name="bench")
        await broker.start()
        q = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="bench", tuning=Tuning())
        try:
            # Light load: the seat and its baseline take turns, so a noisy neighbour lands on both.
            solo, solo_base = [], []
            for _ in range(2):
                solo_base += await baseline_solo(q, solo_turns // 2)
                solo += await solo_run(q, solo_turns // 2)
            print("\n== light load: one seat, one message at a time")
            print(f"  fetch to ack less the provider, seat host   {figures(sorted(solo))}   (target p50 < 5 ms)")
            print(f"  baseline, the queue alone (same run)        {figures(sorted(solo_base))}")
            print(f"  the host's share at p50                     {pct(sorted(solo), 0.5) - pct(sorted(solo_base), 0.5):6.2f} ms")
            for window, max_batch in ((0, 20), (0, 100), (1, 100)):
                base = await baseline_run(q, plan(conversations, messages, "base"), window, max_batch)
                result = await seats_run(q, plan(conversations, messages), window, max_batch)
                report(f"notification_coalesce_window_seconds {window}, notification_coalesce_max_batch {max_batch}",
                       result, base, conversations)
        finally:
            await q.close()
            await broker.stop()


if __name__ == "__main__":
    # The node's own event loop (uvloop), as `crewlet_node` runs it.
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(main())
