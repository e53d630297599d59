"""The turn engine (seed 000, "Event Types" and "Distributed Tracing"; seed 002, "Token
Budgets"): what a turn publishes, under which trace, and how each way of ending reads."""
from __future__ import annotations

import uuid

import pytest

from tests.spans import spans  # noqa: F401  (a fixture)

from engine.coord.contract import Unavailable
from engine.coord.local import LocalCoord
from events import tracing
from events.envelope import Event, new
from events.types.notification import ExternalNotification
from events.types.task import TaskAssigned
from seats.budgets import BUDGETS_BUCKET, Budgets, Refusal
from seats.memory import ConversationMemory
from seats.providers import ChainEmpty
from seats.turn import CompletedWhileCancelled, TurnEngine, TurnRequest, user_text
from tests.seats.test_providers import (
    Reply,
    chat_body,
    company_of,
    endpoint,  # noqa: F401  (the fixture)
    openai_entry,
)

pytestmark = pytest.mark.timeout(30)

SCRIPTED = {"name": "demo", "kind": "scripted", "reply": "{seat} ({role}) is on {trigger_summary}"}
OPENING = ["agent_turn_started", "agent_phase_started", "prompt.size"]
TURN_EVENTS = (*OPENING, "agent_phase_completed", "agent_turn_completed")


class Published:
    """The engine's publish: every event, in order. `events` leaves out the live-only
    agent_turn_progress (published beside the rounds, so its place among the rest is not
    fixed); `progress` holds those."""

    def __init__(self) -> None:
        self.everything: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.everything.append(event)

    @property
    def events(self) -> list[Event]:
        return [e for e in self.everything if e.type != "agent_turn_progress"]

    @property
    def progress(self) -> list[Event]:
        return [e for e in self.everything if e.type == "agent_turn_progress"]

    @property
    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def one(self, event_type: str) -> Event:
        [event] = [e for e in self.events if e.type == event_type]
        return event


def slack_message(**fields) -> Event:
    """A trigger as the webhook edge publishes it: inside its own span, so it has a trace."""
    data = ExternalNotification(agent_handle="alice", event_kind="message", sender="maya", subject="#eng",
                                body="Can you look at the flaky deploy?", conversation_identity="slack:C1:171.2",
                                **fields)
    with tracing.span("webhook.receive"):
        return new(data, tracing.trace_of(), source="slack", payload={"partition_key": "slack:C1"})


def request_for(company, trigger: Event, **kw) -> TurnRequest:
    return TurnRequest(seat=company.seat_by_handle("alice"), company=company, trigger=trigger,
                       constituents=[trigger], turn_id=str(uuid.uuid4()), **kw)


async def test_a_turn_publishes_started_phase_and_completed_under_the_triggers_trace():
    company, published = company_of([SCRIPTED]), Published()
    trigger = slack_message()
    request = request_for(company, trigger)
    result = await TurnEngine(node_id="node-a", publish=published).run(request)

    assert published.types == list(TURN_EVENTS)
    started, opened, size, phase, completed = published.events
    for event in (started, completed):
        assert event.parent_span_id == trigger.span_id            # agent.turn is the trigger span's child
        assert event.span_id == started.span_id != trigger.span_id  # ...and emitted these
    for event in (opened, size, phase):                           # agent.turn.respond under agent.turn
        assert event.parent_span_id == started.span_id != event.span_id
    for event in published.events:
        assert event.trace_id == trigger.trace_id                 # one trace, the trigger's
        assert (event.get("agent_id"), event.get("agent_handle"), event.get("agent_role")) == \
            (str(company.agent_id_for("alice")), "alice", "engineer")
        assert (event.get("turn_id"), event.get("conversation_key")) == (request.turn_id, "slack:C1:171.2")
    assert (started.get("trigger_id"), started.get("trigger_type"), started.get("trigger_ids")) == \
        (str(trigger.id), "external_notification", [str(trigger.id)])

    assert phase.get("system_prompt").splitlines()[:3] == [
        "You are alice, Staff Engineer, at acme.", "Your role: engineer.", "You report to maya."]
    user = phase.get("user_prompt")
    assert user.startswith(trigger.summary()) and "From: maya" in user and "Subject: #eng" in user
    assert user.endswith("Can you look at the flaky deploy?")
    response = f"alice (engineer) is on {trigger.summary()}"
    assert phase.get("response") == response and phase.get("provider_key") == "demo"
    [round_] = phase.get("rounds")
    assert (round_["round"], round_["provider_key"], round_["stop_reason"], round_["model"]) == (1, "demo", "end", "scripted")
    assert round_["tokens_out"] == -(-len(response) // 4) and round_["tokens_in"] > 0

    assert (completed.get("outcome"), completed.get("failed"), completed.get("stopped")) == ("completed", False, False)
    assert (completed.get("tokens_in"), completed.get("tokens_out")) == (round_["tokens_in"], round_["tokens_out"])
    assert (result.outcome, result.rounds, result.response, result.turn_id) == ("completed", 1, response, request.turn_id)
    assert (result.tokens_in, result.tokens_out) == (round_["tokens_in"], round_["tokens_out"])
    assert result.duration_ms == completed.get("duration_ms") >= 0


async def test_a_provider_fallback_is_addressed_to_its_provider_calls_span_inside_the_turn(endpoint):
    endpoint.script = [Reply(401, {"error": {"message": "bad key"}})]
    company, published = company_of([openai_entry(endpoint.base_url), SCRIPTED]), Published()
    trigger = slack_message()
    result = await TurnEngine(node_id="node-a", publish=published).run(request_for(company, trigger))
    assert result.outcome == "completed"
    assert published.types == [*OPENING, "provider_fallback", "agent_phase_completed", "agent_turn_completed"]
    started, fallback = published.events[0], published.events[3]
    phase = published.one("agent_phase_completed")
    assert (fallback.get("from_provider_key"), fallback.get("to_provider_key"), fallback.get("error_kind")) == \
        ("main", "demo", "auth")
    assert fallback.trace_id == trigger.trace_id
    assert fallback.parent_span_id == phase.span_id  # llm.round under agent.turn.respond ...
    assert phase.parent_span_id == started.span_id   # ... under agent.turn
    assert phase.get("provider_key") == "demo"


async def test_one_round_is_one_llm_round_span_however_many_members_it_tries(endpoint, spans):
    endpoint.script = [Reply(401, {"error": {"message": "bad key"}})]
    company, published = company_of([openai_entry(endpoint.base_url), SCRIPTED]), Published()
    trigger = slack_message()
    await TurnEngine(node_id="node-a", publish=published).run(request_for(company, trigger))
    ours = [s for s in spans.get_finished_spans() if format(s.context.trace_id, "032x") == trigger.trace_id
            and s.name != "webhook.receive"]  # the trigger's own, made by the test's delivery
    names = [s.name for s in ours]
    assert sorted(names) == ["agent.turn", "agent.turn.respond", "llm.round"]  # two members tried, one round
    by = {s.name: s for s in ours}
    assert by["llm.round"].parent.span_id == by["agent.turn.respond"].context.span_id
    assert by["agent.turn.respond"].parent.span_id == by["agent.turn"].context.span_id
    assert by["llm.round"].attributes["provider"] == "demo" and by["llm.round"].attributes["round"] == 1


async def test_an_exhausted_chain_ends_the_turn_llm_unavailable_as_an_outcome_not_an_exception(endpoint):
    endpoint.script = [Reply(500, {})]
    company = company_of([openai_entry(endpoint.base_url, max_retries=0)])
    published = Published()
    result = await TurnEngine(node_id="node-a", publish=published).run(request_for(company, slack_message()))
    assert published.types == [*OPENING, "provider_fallback", "llm_unavailable",
                               "agent_phase_completed", "agent_turn_completed"]
    assert published.one("provider_fallback").get("to_provider_key") == ""
    phase, completed = published.events[-2:]
    assert (phase.get("failed"), phase.get("error_kind"), phase.get("rounds")) == (True, "server", [])
    assert (completed.get("outcome"), completed.get("failed"), completed.get("error_kind")) == ("llm_unavailable", True, "server")
    assert (result.outcome, result.rounds, result.error_kind) == ("llm_unavailable", 0, "server")


async def test_a_person_stopping_the_turn_ends_it_before_its_next_round():
    # a reply cut at max_tokens earns a continuation round; the stop lands before it
    company = company_of([{"name": "demo", "kind": "scripted", "reply": "word " * 40}])
    asked = []

    def stop_requested():
        asked.append(True)
        return {"stopped_by": "maya@acme", "stopped_by_seat": "maya", "reason": "wrong repo"} if len(asked) > 1 else False

    published = Published()
    engine = TurnEngine(node_id="node-a", publish=published, max_tokens=10)
    result = await engine.run(request_for(company, slack_message(), stop_requested=stop_requested))
    assert published.types == [*OPENING, "agent_turn_stopped", "agent_phase_completed", "agent_turn_completed"]
    stopped = published.one("agent_turn_stopped")
    assert (stopped.get("stopped_by"), stopped.get("stopped_by_seat"), stopped.get("reason")) == ("maya@acme", "maya", "wrong repo")
    phase, completed = published.events[-2:]
    assert (len(phase.get("rounds")), phase.get("stop_reason")) == (1, "paused")
    assert (completed.get("outcome"), completed.get("stopped"), completed.get("failed")) == ("stopped", True, False)
    assert (result.outcome, result.rounds, result.tokens_out) == ("stopped", 1, 10)


async def test_a_stop_before_the_first_round_calls_no_provider(endpoint):
    company, published = company_of([openai_entry(endpoint.base_url)]), Published()
    result = await TurnEngine(node_id="node-a", publish=published).run(
        request_for(company, slack_message(), stop_requested=lambda: True))
    assert (result.outcome, result.rounds) == ("stopped", 0)
    assert endpoint.requests == []
    assert published.one("agent_turn_stopped").get("stopped_by") == ""


async def test_a_reply_cut_at_max_tokens_continues_in_the_next_round():
    company, published = company_of([{"name": "demo", "kind": "scripted", "reply": "x" * 30}]), Published()
    result = await TurnEngine(node_id="node-a", publish=published, max_tokens=4, max_rounds=3).run(
        request_for(company, slack_message()))
    rounds = published.one("agent_phase_completed").get("rounds")
    assert [(r["round"], r["stop_reason"]) for r in rounds] == [(1, "max_tokens"), (2, "max_tokens"), (3, "max_tokens")]
    assert (result.outcome, result.rounds, result.response) == ("completed", 3, "x" * 48)


async def test_a_charge_the_budget_refuses_ends_the_turn_with_budget_exhausted():
    company = company_of([{"name": "demo", "kind": "scripted", "reply": "word " * 40}], token_budget={"day": 15})
    budgets, published = Budgets(LocalCoord()), Published()
    engine = TurnEngine(node_id="node-a", publish=published, budgets=budgets, max_tokens=10)
    result = await engine.run(request_for(company, slack_message()))
    assert published.types == [*OPENING, "budget_exhausted", "agent_phase_completed", "agent_turn_completed"]
    exhausted = published.one("budget_exhausted")
    assert isinstance(result.refusal, Refusal)
    assert (exhausted.get("scope"), exhausted.get("period"), exhausted.get("ceiling")) == ("company", "day", 15)
    assert exhausted.get("spend") == result.refusal.spend == result.tokens_in + result.tokens_out > 15
    assert exhausted.get("resets_at") == result.refusal.resets_at
    completed = published.one("agent_turn_completed")
    assert (completed.get("outcome"), completed.get("failed"), completed.get("error_kind")) == \
        ("budget_exhausted", True, "budget_exhausted")
    assert (result.outcome, result.rounds) == ("budget_exhausted", 1)  # the refused round is not followed by another


async def test_a_window_already_full_turns_the_round_away_before_its_call(endpoint):
    company = company_of([openai_entry(endpoint.base_url)], token_budget={"week": 100})
    budgets, published = Budgets(LocalCoord()), Published()
    await budgets.charge(company, company.seat_by_handle("bob"), 100)
    result = await TurnEngine(node_id="node-a", publish=published, budgets=budgets).run(
        request_for(company, slack_message()))
    assert (result.outcome, result.rounds, result.refusal.period) == ("budget_exhausted", 0, "week")
    assert endpoint.requests == []


async def test_a_turn_charges_every_round_to_the_seat_and_the_company(endpoint):
    endpoint.script = [Reply(body=chat_body("Done.", prompt_tokens=40, completion_tokens=2))]
    company = company_of([openai_entry(endpoint.base_url)])
    budgets = Budgets(LocalCoord())
    await TurnEngine(node_id="node-a", publish=Published(), budgets=budgets).run(request_for(company, slack_message()))
    shown = await budgets.snapshot(company)
    assert shown["company"]["day"]["spend"] == shown["seats"]["alice"]["month"]["spend"] == 42


async def test_every_round_of_a_continued_reply_is_charged_before_the_next_is_judged():
    # nothing capped: each tool-less round's charge lands beside what follows it, never lost
    company = company_of([{"name": "demo", "kind": "scripted", "reply": "x" * 30}])
    budgets = Budgets(LocalCoord())
    result = await TurnEngine(node_id="node-a", publish=Published(), budgets=budgets, max_tokens=4, max_rounds=3).run(
        request_for(company, slack_message()))
    assert result.rounds == 3
    shown = await budgets.snapshot(company)
    assert shown["company"]["day"]["spend"] == shown["seats"]["alice"]["week"]["spend"] == result.tokens_in + result.tokens_out


class BudgetsDown(LocalCoord):
    """The coordination twin whose budget counters do not answer (the rest of the store does)."""

    async def get(self, bucket, key):
        if bucket == BUDGETS_BUCKET:
            raise Unavailable(f"coord: {bucket}: the broker did not answer (TimeoutError)")
        return await super().get(bucket, key)


async def test_an_uncapped_charge_the_store_did_not_answer_fails_the_turn_before_its_memory_and_its_end():
    company, published = company_of([SCRIPTED]), Published()
    coord = BudgetsDown()
    memory = ConversationMemory(coord)
    engine = TurnEngine(node_id="node-a", publish=published, budgets=Budgets(coord), memory=memory)
    with pytest.raises(Unavailable):
        await engine.run(request_for(company, slack_message()))
    assert "agent_turn_completed" not in published.types  # the host defers the mail: the turn runs again
    assert (await memory.recall("alice", "slack:C1:171.2", 1000)).exchanges == []


async def test_a_merged_trigger_is_worked_from_its_digest_under_its_partition_key():
    company, published = company_of([SCRIPTED]), Published()
    with tracing.span("coalesce"):
        merged = new(ExternalNotification(agent_handle="alice", body="maya: deploy is red\nbob: and staging"),
                     tracing.trace_of(), source="slack", payload={"partition_key": "slack:C1"})
    parts = [slack_message(), slack_message()]
    request = TurnRequest(seat=company.seat_by_handle("alice"), company=company, trigger=merged,
                          constituents=parts, turn_id=str(uuid.uuid4()))
    await TurnEngine(node_id="node-a", publish=published).run(request)
    started = published.one("agent_turn_started")
    assert started.get("conversation_key") == "slack:C1"
    assert started.get("trigger_ids") == [str(e.id) for e in parts]
    assert published.one("agent_phase_completed").get("user_prompt").endswith("maya: deploy is red\nbob: and staging")


def test_a_task_assigned_trigger_puts_its_task_in_the_prompt():
    task = new(TaskAssigned(agent_handle="alice", task="Rotate the staging keys", assigned_by="maya"), tracing.trace_of())
    assert user_text(task) == f"{task.summary()}\nTask: Rotate the staging keys"


async def test_a_turn_inherits_its_triggers_delegation_depth_and_chain():
    company, published = company_of([SCRIPTED]), Published()
    trigger = slack_message().replace(delegation_depth=2, delegation_chain=("bob", "carol"), parent_turn_id="t-0")
    await TurnEngine(node_id="node-a", publish=published).run(request_for(company, trigger))
    for event in published.events:
        assert (event.delegation_depth, event.delegation_chain, event.parent_turn_id) == (2, ("bob", "carol"), "t-0")


async def test_a_company_with_no_provider_runs_no_turn():
    company, published = company_of([]), Published()
    with pytest.raises(ChainEmpty):
        await TurnEngine(node_id="node-a", publish=published).run(request_for(company, slack_message()))
    assert published.events == []


async def test_an_exception_in_the_turns_own_code_propagates():
    company, published = company_of([SCRIPTED]), Published()

    def broken():
        raise RuntimeError("pause store gone")

    with pytest.raises(RuntimeError, match="pause store gone"):
        await TurnEngine(node_id="node-a", publish=published).run(
            request_for(company, slack_message(), stop_requested=broken))
    assert published.types == OPENING


async def test_a_turn_cancelled_mid_round_records_its_end_as_interrupted_in_its_own_span():
    import asyncio

    company, published = company_of([{**SCRIPTED, "delay_seconds": 30}]), Published()
    request = request_for(company, slack_message())
    running = asyncio.ensure_future(TurnEngine(node_id="node-a", publish=published).run(request))
    while "prompt.size" not in published.types:  # the round's model call has begun
        await asyncio.sleep(0.01)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert published.types == [*OPENING, "agent_turn_completed"]
    started, completed = published.events[0], published.one("agent_turn_completed")
    assert (completed.get("outcome"), completed.get("failed"), completed.get("error_kind")) == ("interrupted", True, "released")
    assert (completed.get("turn_id"), completed.span_id, completed.trace_id) == (request.turn_id, started.span_id, started.trace_id)
    assert completed.get("trigger_ids") == started.get("trigger_ids")
    assert "interrupted" in completed.summary()


async def test_a_cancelled_turn_whose_end_cannot_be_published_still_lets_the_cancel_through():
    import asyncio

    company = company_of([{**SCRIPTED, "delay_seconds": 30}])
    began = asyncio.Event()

    async def publish(event: Event) -> None:
        if event.type == "agent_turn_completed":
            await asyncio.sleep(3600)  # a broker that never answers
        began.set()

    running = asyncio.ensure_future(TurnEngine(node_id="node-a", publish=publish).run(request_for(company, slack_message())))
    await began.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


async def test_a_node_that_lost_the_seat_mid_turn_stops_before_its_next_round_and_records_it_interrupted():
    # a reply cut at max_tokens earns a continuation round; the lease is lost during the first
    company = company_of([{"name": "demo", "kind": "scripted", "reply": "word " * 40}])
    asked = []

    def fence() -> bool:
        asked.append(True)
        return len(asked) == 1

    published = Published()
    result = await TurnEngine(node_id="node-a", publish=published, max_tokens=10).run(
        request_for(company, slack_message(), fence=fence))
    assert (result.outcome, result.error_kind, result.rounds) == ("interrupted", "fence", 1)
    # on the record as interrupted, never completed: the seat's holder works the mail once
    assert published.one("agent_turn_completed").get("outcome") == "interrupted"


async def test_a_lease_lost_while_the_last_round_ran_is_no_completed_turn():
    company, published = company_of([SCRIPTED]), Published()
    asked = []

    def fence() -> bool:  # exclusive at the round's top, gone by the time it answered
        asked.append(True)
        return len(asked) == 1

    result = await TurnEngine(node_id="node-a", publish=published).run(request_for(company, slack_message(), fence=fence))
    assert (result.outcome, result.error_kind, result.rounds) == ("interrupted", "fence", 1)
    assert published.one("agent_turn_completed").get("outcome") == "interrupted"
    assert not result.shown_waiting  # nothing it was shown is settled as answered


async def test_a_cancel_that_lands_while_the_completed_record_is_published_leaves_one_completed_turn():
    # The host lets the seat go just as the turn's end is on its way to the broker: that end
    # stands, the turn comes back completed for the host to settle, and no `interrupted` record
    # follows it (a second end would send the trigger to the seat's next holder, a second turn).
    import asyncio

    company = company_of([SCRIPTED])
    sent: list[Event] = []
    ending = asyncio.Event()

    async def publish(event: Event) -> None:
        if event.type == "agent_turn_completed":
            ending.set()
            await asyncio.sleep(0.2)  # the broker taking it
        sent.append(event)

    memory = ConversationMemory(LocalCoord())
    running = asyncio.ensure_future(TurnEngine(node_id="node-a", publish=publish, memory=memory).run(
        request_for(company, slack_message())))
    await ending.wait()
    running.cancel()
    with pytest.raises(CompletedWhileCancelled) as cut:  # the cancel goes on, carrying the completed turn
        await running
    result = cut.value.result
    assert result.outcome == "completed"
    ends = [e for e in sent if e.type == "agent_turn_completed"]
    assert [e.get("outcome") for e in ends] == ["completed"]
    # what the completed turn did is remembered for the conversation's next turn, wherever it runs
    [remembered] = (await memory.recall("alice", "slack:C1:171.2", 1000)).exchanges
    assert remembered.turn_id == result.turn_id


async def test_an_asks_answer_goes_out_as_soon_as_the_final_response_is_known_not_after_the_turns_records():
    # The answer is the final response: the asker is woken while the answering turn's phase and
    # end records are still on their way, and the turn hands the answer's outcome back.
    import asyncio

    company = company_of([SCRIPTED])
    sent: list[str] = []
    records_held = asyncio.Event()
    answered: list[tuple[str, list[str]]] = []
    answering = asyncio.Event()

    async def publish(event: Event) -> None:
        if event.type in ("agent_phase_completed", "agent_turn_completed"):
            await records_held.wait()  # the broker slow to take the turn's last records
        sent.append(event.type)

    async def answer(response: str) -> str:
        answered.append((response, list(sent)))
        answering.set()
        return "answered"

    trigger = slack_message()
    running = asyncio.ensure_future(TurnEngine(node_id="node-a", publish=publish).run(
        request_for(company, trigger, answer=answer)))
    await asyncio.wait_for(answering.wait(), 10)  # a deadline, not a measurement
    [(response, before)] = answered
    assert response == f"alice (engineer) is on {trigger.summary()}"
    assert "agent_phase_completed" not in before and "agent_turn_completed" not in before
    assert not running.done()
    records_held.set()
    result = await running
    assert result.outcome == "completed" and result.response == response
    assert result.answering is not None and await result.answering == "answered"


async def test_a_turn_that_does_not_complete_sends_no_answer():
    # A lease lost while the last round ran, or a budget that refused the round: the turn's end
    # is not `completed`, so nothing answers the ask (its redelivery is answered where it runs).
    answered: list[str] = []

    async def answer(response: str) -> str:
        answered.append(response)
        return "answered"

    asked = []

    def fence() -> bool:
        asked.append(True)
        return len(asked) == 1

    lost = await TurnEngine(node_id="node-a", publish=Published()).run(
        request_for(company_of([SCRIPTED]), slack_message(), fence=fence, answer=answer))
    refused_company = company_of([{"name": "demo", "kind": "scripted", "reply": "word " * 40}], token_budget={"day": 15})
    refused = await TurnEngine(node_id="node-a", publish=Published(), budgets=Budgets(LocalCoord()), max_tokens=10).run(
        request_for(refused_company, slack_message(), answer=answer))
    assert (lost.outcome, refused.outcome) == ("interrupted", "budget_exhausted")
    assert answered == [] and lost.answering is None and refused.answering is None
