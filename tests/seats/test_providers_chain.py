"""The fallback chain over `company.providers.llm` (seed 000, "Event Types": provider_fallback,
llm_unavailable), with real members: an openai member on a real local endpoint, and the
scripted one."""
from __future__ import annotations

import pytest

from events import tracing
from events.types.system import LLMUnavailable, ProviderFallback
from seats.providers import ChainEmpty, ChainExhausted, ProviderChain, members_for
from tests.seats.test_providers import (
    MESSAGES,
    Reply,
    closed_port_url,  # noqa: F401  (the fixture)
    company_of,
    endpoint,  # noqa: F401  (the fixture)
    openai_entry,
)

pytestmark = pytest.mark.timeout(30)

SCRIPTED = {"name": "demo", "kind": "scripted", "reply": "Scripted answer."}


class Emitted:
    """The chain's emit: keeps each event body with the trace it was emitted under."""

    def __init__(self) -> None:
        self.events: list = []

    async def __call__(self, data) -> None:
        self.events.append((data, tracing.trace_of()))

    def of(self, kind) -> list:
        return [data for data, _ in self.events if isinstance(data, kind)]


async def test_a_failing_member_hands_the_call_to_the_next_and_says_so(endpoint):
    endpoint.script = [Reply(401, {"error": {"message": "bad key"}})]
    company = company_of([openai_entry(endpoint.base_url, max_retries=0), SCRIPTED])
    emitted = Emitted()
    chain = ProviderChain(members_for(company), emit=emitted, phase="respond", iteration=1)
    with tracing.span("agent.turn") as turn:
        answer = await chain.complete(MESSAGES, max_tokens=100, round=1)
    assert (answer.provider_key, answer.completion.text) == ("demo", "Scripted answer.")
    [(fallback, trace)] = emitted.events
    assert isinstance(fallback, ProviderFallback)
    assert (fallback.from_provider_key, fallback.to_provider_key, fallback.error_kind) == ("main", "demo", "auth")
    assert (fallback.phase, fallback.iteration, fallback.round) == ("respond", 1, 1)
    # addressed to the failed call: its own llm.round span, under the turn's
    assert trace.trace_id == turn.trace_id and trace.parent_span_id == turn.span_id
    assert trace.span_id != turn.span_id


async def test_every_round_walks_the_chain_from_the_top_so_a_failing_member_is_a_hand_off_each_time(endpoint):
    endpoint.script = [Reply(500, {}), Reply(500, {})]
    company = company_of([openai_entry(endpoint.base_url, max_retries=0), SCRIPTED])
    emitted = Emitted()
    chain = ProviderChain(members_for(company), emit=emitted)
    for number in (1, 2):
        assert (await chain.complete(MESSAGES, max_tokens=100, round=number)).provider_key == "demo"
    assert [(f.round, f.error_kind) for f in emitted.of(ProviderFallback)] == [(1, "server"), (2, "server")]
    assert len(endpoint.requests) == 2


async def test_an_exhausted_chain_publishes_a_last_hand_off_to_nobody_then_llm_unavailable(endpoint, closed_port_url):
    endpoint.script = [Reply(503, {"error": {"message": "overloaded"}})]
    company = company_of([openai_entry(endpoint.base_url, max_retries=0),
                          openai_entry(closed_port_url, name="backup", max_retries=0)])
    emitted = Emitted()
    with pytest.raises(ChainExhausted) as info:
        await ProviderChain(members_for(company), emit=emitted, phase="respond").complete(MESSAGES, max_tokens=100)
    first, last, unavailable = [data for data, _ in emitted.events]
    assert (first.from_provider_key, first.to_provider_key, first.error_kind) == ("main", "backup", "server")
    assert (last.from_provider_key, last.to_provider_key, last.error_kind) == ("backup", "", "unreachable")
    assert isinstance(unavailable, LLMUnavailable)
    assert (unavailable.providers, unavailable.error_kind, unavailable.phase) == (["main", "backup"], "unreachable", "respond")
    assert [e.kind for e in info.value.errors] == ["server", "unreachable"]


async def test_an_empty_chain_is_never_called():
    emitted = Emitted()
    with pytest.raises(ChainEmpty):
        await ProviderChain([], emit=emitted).complete(MESSAGES, max_tokens=100)
    assert emitted.events == []
