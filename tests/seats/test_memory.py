"""Conversation memory (seed 000, "Inbox Batching & Coalescing": "conversation sessions carry what
the seat did about them into that conversation's next turn"), kept in the coordination store so
it survives a restart and follows the seat to another node: on the in-process twin and on NATS
KV of a real nats-server."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from engine.coord.local import LocalCoord
from events import tracing
from events.envelope import new
from events.types.notification import ExternalNotification
from events.types.task import TaskAssigned
from seats.memory import MEMORY_BUCKET, ConversationMemory, Exchange, Waiting
from seats.tools.servers import ToolServers
from seats.turn import TurnEngine, TurnRequest
from tests.coord.conftest import LocalBackend, NatsBackend
from tests.seats.test_providers import Reply, chat_body, endpoint  # noqa: F401  (the fixture)
from tests.seats.test_turn import Published
from tests.seats.tooling import openai_calls, stdio_entry, tool_company

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["local", "embedded-kv"])
async def stores(request, tmp_path):
    """One coordination store that two nodes attach to."""
    backend = LocalBackend() if request.param == "local" else NatsBackend(tmp_path / "stream")
    if request.param != "local":
        await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


def said(text: str, *, identity: str = "slack:C7:100.1", sender: str = "maya"):
    with tracing.span("webhook.receive"):
        return new(ExternalNotification(agent_handle="alice", event_kind="message", sender=sender, body=text,
                                        conversation_identity=identity), tracing.trace_of(), source="slack")


def provider(endpoint) -> dict:
    return {"name": "main", "kind": "openai", "base_url": endpoint.base_url, "model": "m", "api_key": "${LLM_KEY}",
            "max_retries": 0}


async def turn(company, store, trigger, servers=None):
    engine = TurnEngine(node_id="node-x", publish=Published(), memory=ConversationMemory(store), tools=servers)
    try:
        return await engine.run(TurnRequest(seat=company.seat_by_handle("alice"), company=company, trigger=trigger,
                                            constituents=[trigger], turn_id=str(uuid.uuid4())))
    finally:
        await engine.close()


async def test_a_seats_turn_on_a_conversation_is_shown_to_its_next_turn_there_on_another_node(stores, endpoint, tmp_path):
    servers = ToolServers(cwd=tmp_path)
    company = tool_company([provider(endpoint)], [stdio_entry("calc", tmp_path / "calc.calls")])
    await servers.on_company(company)
    try:
        endpoint.script = [Reply(body=openai_calls(("c1", "calc__add", {"a": 2, "b": 2}))),
                           Reply(body=chat_body("It is 4.")), Reply(body=chat_body("Still 4."))]
        await turn(company, await stores.store("node-a"), said("What is 2 + 2?"), servers)
        await turn(company, await stores.store("node-b"), said("Are you sure?"), servers)
    finally:
        await servers.stop()
    messages = endpoint.requests[2]["body"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    earlier, did, now = messages[1:]
    assert earlier["content"].startswith("[earlier in this conversation, ") and "What is 2 + 2?" in earlier["content"]
    assert did["content"] == 'I called calc__add {"a": 2, "b": 2} -> 4\n\nIt is 4.'
    assert now["content"].endswith("Are you sure?")


async def test_another_conversation_or_another_seat_starts_clean(stores, endpoint):
    company = tool_company([provider(endpoint)], [])
    store = await stores.store()
    endpoint.script = [Reply(body=chat_body("one")), Reply(body=chat_body("two"))]
    await turn(company, store, said("first", identity="slack:C7:1.1"))
    await turn(company, store, said("elsewhere", identity="slack:C7:2.2"))
    assert [m["role"] for m in endpoint.requests[1]["body"]["messages"]] == ["system", "user"]
    memory = ConversationMemory(store)
    assert (await memory.recall("bob", "slack:C7:1.1", 8000)).exchanges == []
    assert len((await memory.recall("alice", "slack:C7:1.1", 8000)).exchanges) == 1


async def test_a_trigger_without_a_conversation_identity_leaves_nothing_behind(stores, endpoint):
    company = tool_company([provider(endpoint)], [])
    store = await stores.store()
    task = new(TaskAssigned(agent_handle="alice", task="Rotate the keys", assigned_by="maya"), tracing.trace_of())
    await turn(company, store, task)
    await turn(company, store, said("x", identity="event:" + str(uuid.uuid4())))
    await ConversationMemory(store).provision()
    assert await store.keys(MEMORY_BUCKET) == []


def exchange(n: int, chars: int = 400) -> Exchange:
    return Exchange(turn_id=f"t{n}", at=f"2025-01-0{n}T00:00:00+00:00", asked=f"ask {n} " + "x" * chars, answer=f"answer {n}")


async def test_memory_is_bounded_by_memory_tokens_oldest_first_and_a_lowered_budget_applies_on_read(stores):
    memory = ConversationMemory(await stores.store())
    for n in range(1, 6):
        await memory.remember("alice", "jira:POC-7", exchange(n), budget=250)  # each about 105 tokens
    kept = await memory.recall("alice", "jira:POC-7", 250)
    assert [e.turn_id for e in kept.exchanges] == ["t4", "t5"]
    assert [e.turn_id for e in (await memory.recall("alice", "jira:POC-7", 150)).exchanges] == ["t5"]
    assert (await memory.recall("alice", "jira:POC-7", 0)).exchanges == []  # 0 turns memory off


async def test_waiting_messages_come_first_within_the_bound_and_the_turns_own_are_left_out(stores):
    memory = ConversationMemory(await stores.store())
    await memory.remember("alice", "slack:D1", exchange(1), budget=1000)
    await memory.remember("alice", "slack:D1", None, budget=1000,
                          waiting=[Waiting(id="m1", at="t", sender="dana", text="deploy?"),
                                   Waiting(id="m2", at="t", sender="dana", text="and staging?")])
    shown = await memory.recall("alice", "slack:D1", 1000, exclude={"m2"})
    assert [w.id for w in shown.waiting] == ["m1"] and [e.turn_id for e in shown.exchanges] == ["t1"]
    tight = await memory.recall("alice", "slack:D1", 5)
    assert [w.id for w in tight.waiting] == ["m2"]  # the newest that fits; m1 is not shown, so not claimed
    await memory.remember("alice", "slack:D1", exchange(2), budget=1000, answered={"m1"})
    assert [w.id for w in (await memory.recall("alice", "slack:D1", 1000)).waiting] == ["m2"]


async def test_writes_that_race_all_land(stores):
    memory = ConversationMemory(await stores.store("node-a"))
    other = ConversationMemory(await stores.store("node-b"))
    await asyncio.gather(*(m.remember("alice", "gh:org/repo#1", exchange(n, 10), budget=8000)
                           for n, m in zip(range(1, 7), [memory, other] * 3, strict=True)))
    assert sorted(e.turn_id for e in (await memory.recall("alice", "gh:org/repo#1", 8000)).exchanges) == \
        [f"t{n}" for n in range(1, 7)]


async def test_a_turn_writing_over_what_it_recalled_keeps_a_record_written_since(stores):
    # a turn's write goes over the revision its recall read; another node's write in between
    # (the seat moved while the turn ran) makes it read again, and both exchanges stay
    memory = ConversationMemory(await stores.store("node-a"))
    other = ConversationMemory(await stores.store("node-b"))
    for mine, theirs in ((2, 1), (4, 3)):
        recalled = await memory.recall("alice", "gh:org/repo#2", 8000)
        await other.remember("alice", "gh:org/repo#2", exchange(theirs, 10), budget=8000)
        await memory.remember("alice", "gh:org/repo#2", exchange(mine, 10), budget=8000, read=recalled.read)
    assert [e.turn_id for e in (await memory.recall("alice", "gh:org/repo#2", 8000)).exchanges] == ["t1", "t2", "t3", "t4"]


async def test_a_store_that_does_not_answer_costs_the_turn_its_memory_not_the_turn(endpoint):
    coord = LocalCoord()
    await coord.close()  # every call raises Unavailable
    company = tool_company([provider(endpoint)], [])
    result = await turn(company, coord, said("hello"))
    assert result.outcome == "completed"
