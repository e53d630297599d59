"""Conformance: request/reply (seed 000, "Reading the fleet's history": "the broker's ephemeral
request/reply -- no stream, no consumer, no stored record"). A responder on one node answers
a question from another; silence and absence are told apart; nothing is stored; a slow
answer does not hold up the next question. Every case runs against both backends."""
from __future__ import annotations

import asyncio

import pytest

from engine.queue import topics
from engine.queue.contract import NoResponders, PatternError, RequestTimeout
from engine.queue.topics import TopicError

pytestmark = pytest.mark.timeout(30)


async def test_a_responder_on_one_node_answers_a_question_from_another(backend):
    asker, answerer = await backend.client("node-a"), await backend.client("node-b")

    async def upper(payload: bytes) -> bytes:
        return payload.upper() + b" from node-b"

    await answerer.reply(topics.eventfan_subject("node-b"), upper)
    answer = await asker.request(topics.eventfan_subject("node-b"), b"where is the trace?", timeout=5)
    assert answer == b"WHERE IS THE TRACE? from node-b"


async def test_nobody_listening_is_told_apart_from_nobody_answering(backend):
    asker, answerer = await backend.client("node-a"), await backend.client("node-b")
    with pytest.raises(NoResponders):
        await asker.request(topics.eventfan_subject("node-gone"), b"?", timeout=5)

    async def never(payload: bytes) -> bytes:
        await asyncio.Event().wait()
        return b""

    await answerer.reply(topics.eventfan_subject("node-b"), never)
    with pytest.raises(RequestTimeout):
        await asker.request(topics.eventfan_subject("node-b"), b"?", timeout=0.3)


async def test_a_responder_that_fails_answers_nothing_and_the_next_question_is_answered(backend):
    asker, answerer = await backend.client("node-a"), await backend.client("node-b")

    async def picky(payload: bytes) -> bytes:
        if payload == b"bad":
            raise ValueError("cannot read that")
        return b"ok"

    await answerer.reply(topics.eventfan_subject("node-b"), picky)
    with pytest.raises(RequestTimeout):
        await asker.request(topics.eventfan_subject("node-b"), b"bad", timeout=0.3)
    assert await asker.request(topics.eventfan_subject("node-b"), b"good", timeout=5) == b"ok"


async def test_a_slow_answer_does_not_hold_up_the_next_question(backend):
    asker, answerer = await backend.client("node-a"), await backend.client("node-b")
    release = asyncio.Event()

    async def answer(payload: bytes) -> bytes:
        if payload == b"slow":
            await release.wait()
        return payload

    await answerer.reply(topics.eventfan_subject("node-b"), answer)
    slow = asyncio.create_task(asker.request(topics.eventfan_subject("node-b"), b"slow", timeout=10))
    assert await asker.request(topics.eventfan_subject("node-b"), b"quick", timeout=5) == b"quick"
    assert not slow.done()
    release.set()
    assert await slow == b"slow"


async def test_a_closed_responder_stops_answering(backend):
    asker, answerer = await backend.client("node-a"), await backend.client("node-b")

    async def echo(payload: bytes) -> bytes:
        return payload

    handle = await answerer.reply(topics.eventfan_subject("node-b"), echo)
    assert handle.subject == topics.eventfan_subject("node-b")
    assert await asker.request(topics.eventfan_subject("node-b"), b"1", timeout=5) == b"1"
    await handle.close()
    with pytest.raises((NoResponders, RequestTimeout)):  # the server may not have seen the unsubscribe yet
        await asker.request(topics.eventfan_subject("node-b"), b"2", timeout=0.5)


async def test_a_closed_client_stops_answering(backend):
    asker, answerer = await backend.client("node-a"), await backend.client("node-b")

    async def echo(payload: bytes) -> bytes:
        return payload

    await answerer.reply(topics.eventfan_subject("node-b"), echo)
    await answerer.close()
    with pytest.raises((NoResponders, RequestTimeout)):
        await asker.request(topics.eventfan_subject("node-b"), b"anyone?", timeout=0.5)


async def test_request_reply_lives_only_on_its_own_subjects(queue):
    async def echo(payload: bytes) -> bytes:
        return payload

    with pytest.raises(TopicError):
        await queue.reply(topics.NOTIFICATIONS_INBOUND, echo)
    with pytest.raises(TopicError):
        await queue.request(topics.event_subject("probe"), b"?", timeout=1)
    with pytest.raises(PatternError):  # no stream carries a question, so none can be tapped
        await queue.subscribe_stream("crewlet.eventfan.*", lambda e: None)


def test_a_node_id_a_subject_cannot_carry_is_rewritten_and_never_collides():
    assert topics.eventfan_subject("node-1") == "crewlet.eventfan.node-1"
    dotted, underscored = topics.eventfan_subject("a.b"), topics.eventfan_subject("a_b")
    assert dotted != underscored
    assert topics.is_ephemeral(dotted) and len(dotted.split(".")) == 3
