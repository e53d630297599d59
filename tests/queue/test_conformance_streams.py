"""Conformance: broadcast streams (seed 000, "Broadcast Streams"): every subscriber gets every
matching event from now on, acks nothing, a slow subscriber misses events rather than slowing
anyone, and a pattern spanning every namespace is refused. Every case runs against both backends."""
from __future__ import annotations

import asyncio

import pytest

from engine.queue import topics
from engine.queue.contract import PatternError
from tests.queue.recording import GROUP, INBOX, Recorder, label, probe
from tests.queue.waiting import eventually, throughout

pytestmark = pytest.mark.timeout(30)


async def _pending(queue, n: int, topic: str = INBOX, group: str = GROUP) -> bool:  # the count trails the publish's ack
    return await queue.pending(topic, group) == n


class Watcher:
    """A stream handler that records labels; `gate` makes it stall."""

    def __init__(self) -> None:
        self.labels: list[str] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, event) -> None:
        self.labels.append(label(event))
        if self.gate is not None:
            await self.gate.wait()


async def test_a_stream_subscriber_gets_matching_events_from_now_only(queue):
    await queue.publish(topics.event_subject("probe"), probe("history"))
    watcher = Watcher()
    sub = await queue.subscribe_stream(topics.EVENTS_ALL, watcher)
    await queue.publish(topics.event_subject("probe"), probe("live"))
    await queue.publish(topics.event_subject("turn.guard_breach"), probe("dotted"))
    await queue.publish(topics.CONFIG_REVISION_ACTIVATED, probe("elsewhere"))  # another stream
    await eventually(lambda: len(watcher.labels) == 2)
    await throughout(lambda: len(watcher.labels) == 2, window=0.5)
    assert watcher.labels == ["live", "dotted"]
    assert sub.pattern == topics.EVENTS_ALL
    await sub.close()


async def test_a_single_token_wildcard_filters_the_stream(queue):
    watcher = Watcher()
    one_token = topics.event_subject("x").rsplit(".", 1)[0] + ".*"  # crewlet.events.*
    sub = await queue.subscribe_stream(one_token, watcher)
    await queue.publish(topics.event_subject("turn.guard_breach"), probe("two-tokens"))
    await queue.publish(topics.event_subject("probe"), probe("wanted"))
    await eventually(lambda: watcher.labels)
    await throughout(lambda: watcher.labels == ["wanted"], window=0.5)
    await sub.close()


async def test_every_stream_subscriber_gets_every_event_across_nodes(backend):
    a = await backend.client("node-a")
    b = await backend.client("node-b")
    on_a, on_b = Watcher(), Watcher()
    sub_a = await a.subscribe_stream(topics.EVENTS_ALL, on_a)
    sub_b = await b.subscribe_stream(topics.EVENTS_ALL, on_b)
    for n in range(5):
        await a.publish(topics.event_subject("probe"), probe(f"e{n}"))
    await eventually(lambda: len(on_a.labels) == 5 and len(on_b.labels) == 5)
    assert on_a.labels == on_b.labels == [f"e{n}" for n in range(5)]
    await sub_a.close()
    await sub_b.close()


@pytest.mark.parametrize("pattern", [">", "*.>", "*.events.probe", "crewlet.>", "crewlet.*.x"])
async def test_a_pattern_spanning_every_namespace_or_several_streams_is_refused(queue, pattern):
    with pytest.raises(PatternError):
        await queue.subscribe_stream(pattern, Watcher())


async def test_a_slow_stream_subscriber_misses_rather_than_blocks(backend):
    a = await backend.client("node-a")
    slow, fast = Watcher(), Watcher()
    slow.gate = asyncio.Event()  # stalls on its first event
    slow_sub = await a.subscribe_stream(topics.EVENTS_ALL, slow, buffer=4)
    fast_sub = await a.subscribe_stream(topics.EVENTS_ALL, fast, buffer=64)
    await a.ensure_subscription(topics.EVENTS_ALL, "materializer")
    for n in range(40):
        await a.publish(topics.event_subject("probe"), probe(f"e{n}"))  # never waits on `slow`
    await eventually(lambda: len(fast.labels) == 40)
    # At most one in its handler and `buffer` waiting: everything else was missed.
    await eventually(lambda: slow_sub.missed >= 40 - 4 - 1, message=f"missed {slow_sub.missed}")
    await eventually(lambda: _pending(a, 40, topics.EVENTS_ALL, "materializer"), message="the stream did not keep every event")
    assert fast_sub.missed == 0
    slow.gate.set()
    await slow_sub.close()
    await fast_sub.close()


async def test_a_stream_acks_nothing_and_takes_no_mail(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    watcher = Watcher()
    sub = await queue.subscribe_stream(INBOX, watcher)
    await queue.publish(INBOX, probe("m1"))
    await eventually(lambda: watcher.labels == ["m1"])
    await eventually(lambda: _pending(queue, 1), message="the stream took the mailbox's message")
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: seen.labels == ["m1"])
    await sub.close()


async def test_a_closed_stream_gets_nothing_more(queue):
    watcher = Watcher()
    sub = await queue.subscribe_stream(topics.EVENTS_ALL, watcher)
    await queue.publish(topics.event_subject("probe"), probe("before"))
    await eventually(lambda: watcher.labels == ["before"])
    await sub.close()
    await queue.publish(topics.event_subject("probe"), probe("after"))
    await throughout(lambda: watcher.labels == ["before"], window=0.5)


async def test_a_failing_stream_handler_does_not_end_the_stream(queue):
    seen: list[str] = []

    async def flaky(event):
        seen.append(label(event))
        if label(event) == "e0":
            raise RuntimeError("dashboard tab broke")

    sub = await queue.subscribe_stream(topics.EVENTS_ALL, flaky)
    await queue.publish(topics.event_subject("probe"), probe("e0"))
    await queue.publish(topics.event_subject("probe"), probe("e1"))
    await eventually(lambda: seen == ["e0", "e1"])
    await sub.close()
