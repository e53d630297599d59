"""The tool loop (seed 000, "Event Types": agent_phase_started, prompt.size, agent_turn_progress,
agent_phase_completed's rounds[] and stop_reason, agent_turn_completed's tools_used,
turn.guard_breach; seed 002: "the turn loop re-checks the seat fence at the top of every
round"), with real parts: the test's MCP server over stdio, and OpenAI- and Anthropic-compatible
model endpoints that answer with tool calls and then with a final answer."""
from __future__ import annotations

import json
import uuid

import pytest

from events import tracing
from events.envelope import new
from events.types.task import TaskAssigned
from a2a.service import AskOutcome
from seats.tools.builtins import Ask
from seats.tools.servers import ToolServers
from seats.tools.toolbox import EVENT_RESULT_CHARS, MODEL_RESULT_CHARS
from seats.turn import TurnEngine, TurnRequest
from tests.seats.test_providers import Reply, chat_body, endpoint  # noqa: F401  (the fixture)
from tests.seats.test_turn import OPENING, Published, slack_message
from tests.seats.tooling import (
    HttpToolServer,
    anthropic_answer,
    calls,
    headers_of,
    openai_calls,
    stdio_entry,
    text_block,
    tool_company,
    tool_use,
)

pytestmark = pytest.mark.timeout(90)


def openai_entry(endpoint) -> dict:
    return {"name": "main", "kind": "openai", "base_url": endpoint.base_url, "model": "test-model",
            "api_key": "${LLM_KEY}", "max_retries": 0}


def anthropic_entry(endpoint) -> dict:
    return {"name": "claude", "kind": "anthropic", "base_url": endpoint.base_url.removesuffix("/v1"),
            "model": "claude-test", "api_key": "${LLM_KEY}", "max_retries": 0}


class Rig:
    """A turn engine with the test server's tools, and what it published."""

    def __init__(self, tmp_path, endpoint) -> None:
        self.tmp_path, self.endpoint = tmp_path, endpoint
        self.calls_file = tmp_path / "calc.calls"
        self.servers = ToolServers(cwd=tmp_path)
        self.published = Published()
        self.asks: list[Ask] = []

    def company(self, provider: dict | None = None, **kw):
        servers = kw.pop("servers", None) or [stdio_entry("calc", self.calls_file, call_timeout_seconds=5)]
        return tool_company([provider or openai_entry(self.endpoint)], servers, **kw)

    async def ask(self, ask: Ask) -> AskOutcome:
        """Records the ask the tool handed over, as the A2A service would take it."""
        self.asks.append(ask)
        return AskOutcome(ok=True, text=f"asked {ask.target.handle} (channel ch-{len(self.asks)})",
                          channel_id=f"ch-{len(self.asks)}")

    async def run(self, company, trigger=None, *, asker: bool = False, **kw):
        await self.servers.on_company(company)
        engine = TurnEngine(node_id="node-a", publish=self.published, tools=self.servers,
                            asker=self.ask if asker else None)
        trigger = trigger or slack_message()
        request = TurnRequest(seat=company.seat_by_handle("alice"), company=company, trigger=trigger,
                              constituents=[trigger], turn_id=str(uuid.uuid4()), **kw)
        try:
            return await engine.run(request)
        finally:
            await engine.close()

    def calls(self) -> list[dict]:
        return calls(self.calls_file)


@pytest.fixture
async def rig(tmp_path, endpoint):
    made = Rig(tmp_path, endpoint)
    try:
        yield made
    finally:
        await made.servers.stop()


def tool_messages(request: dict) -> list[dict]:
    return [m for m in request["body"]["messages"] if m["role"] == "tool"]


async def test_an_openai_model_calls_a_tool_and_its_result_reaches_the_next_round(rig, endpoint):
    endpoint.script = [Reply(body=openai_calls(("call_1", "calc__add", {"a": 20, "b": 22}), text="Adding.")),
                       Reply(body=chat_body("The answer is 42.", prompt_tokens=60, completion_tokens=6))]
    result = await rig.run(rig.company())
    assert rig.calls() == [{"tool": "add", "arguments": {"a": 20, "b": 22}, "pid": rig.calls()[0]["pid"]}]
    first, second = endpoint.requests
    assert "calc__add" in [t["function"]["name"] for t in first["body"]["tools"]]
    assert tool_messages(second) == [{"role": "tool", "tool_call_id": "call_1", "content": "42"}]
    assert (result.outcome, result.rounds, result.response, result.tools_used) == \
        ("completed", 2, "The answer is 42.", ["calc__add"])

    published = rig.published
    assert published.types == [*OPENING, "agent_phase_completed", "agent_turn_completed"]
    assert published.one("agent_turn_completed").get("tools_used") == ["calc__add"]
    phase = published.one("agent_phase_completed")
    rounds = phase.get("rounds")
    assert [(r["round"], r["stop_reason"], r["text"], r.get("tool_calls")) for r in rounds] == [
        (1, "tool_use", "Adding.", ["call_1"]), (2, "end", "The answer is 42.", None)]
    [call] = phase.get("tool_calls")
    assert {k: call[k] for k in ("id", "round", "name", "server", "tool", "arguments", "result", "is_error", "error")} == \
        {"id": "call_1", "round": 1, "name": "calc__add", "server": "calc", "tool": "add",
         "arguments": {"a": 20, "b": 22}, "result": "42", "is_error": False, "error": ""}
    assert call["duration_ms"] > 0 and call["started_at"]
    assert phase.get("response") == "The answer is 42."
    size = published.one("prompt.size")
    assert size.get("tool_count") == 7 and size.get("tool_bytes") > 0
    stages = [(p.get("round"), p.get("stage")) for p in published.progress]
    assert sorted(stages) == [(1, "answered"), (1, "calling"), (1, "tools"), (2, "answered"), (2, "calling")]
    assert all(p.get("turn_id") == result.turn_id for p in published.progress)


async def test_an_anthropic_model_calls_a_tool_and_its_result_reaches_the_next_round(rig, endpoint):
    endpoint.script = [Reply(body=anthropic_answer(tool_use("toolu_1", "calc__append", {"text": "ship it"}),
                                                   stop_reason="tool_use",
                                                   usage={"input_tokens": 40, "output_tokens": 8,
                                                          "cache_creation_input_tokens": 900})),
                       Reply(body=anthropic_answer(text_block("Noted."), usage={
                           "input_tokens": 12, "output_tokens": 3, "cache_read_input_tokens": 900}))]
    result = await rig.run(rig.company(anthropic_entry(endpoint)))
    assert [c["tool"] for c in rig.calls()] == ["append"]
    second = endpoint.requests[1]
    assert headers_of(second)["anthropic-version"]
    assert second["body"]["messages"][-1] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "stored: ship it", "is_error": False}]}
    assert (result.outcome, result.response, result.tools_used) == ("completed", "Noted.", ["calc__append"])
    completed = rig.published.one("agent_turn_completed")
    assert (completed.get("cache_write_tokens"), completed.get("cache_read_tokens")) == (900, 900)
    assert (completed.get("tokens_in"), completed.get("tokens_out")) == (40 + 900 + 12 + 900, 11)


async def test_several_calls_of_one_round_run_in_parallel_and_answer_in_their_order(rig, endpoint):
    endpoint.script = [Reply(body=openai_calls(("c1", "calc__meet", {"group": "g", "count": 2}),
                                               ("c2", "calc__meet", {"group": "g", "count": 2}),
                                               ("c3", "calc__add", {"a": 1, "b": 1}))),
                       Reply(body=chat_body("All done."))]
    result = await rig.run(rig.company())
    assert result.outcome == "completed"
    # each meet waits until the other is in flight: run one after the other, both say "alone"
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages(endpoint.requests[1])] == \
        [("c1", "met"), ("c2", "met"), ("c3", "2")]


async def test_a_tool_error_an_unknown_tool_and_arguments_off_the_schema_go_back_as_results(rig, endpoint, caplog):
    endpoint.script = [Reply(body=openai_calls(("c1", "calc__fail", {"reason": "disk full"}),
                                               ("c2", "calc__nope", {}),
                                               ("c3", "calc__add", {"a": "two", "b": 2}),
                                               ("c4", "calc__add", "{broken"))),
                       Reply(body=chat_body("I could not."))]
    result = await rig.run(rig.company())
    assert result.outcome == "completed" and result.response == "I could not."
    results = {m["tool_call_id"]: m["content"] for m in tool_messages(endpoint.requests[1])}
    assert "refused: disk full" in results["c1"]
    assert results["c2"].startswith("Error: unknown tool 'calc__nope'; the tools you have are: ") and \
        "calc__add" in results["c2"]
    assert results["c3"] == "Error: the arguments do not match calc__add's schema: a: 'two' is not of type 'integer'"
    assert results["c4"].startswith("Error: the arguments are not JSON")
    assert [c["tool"] for c in rig.calls()] == ["fail"]  # nothing off the schema reached the server
    records = {c["id"]: c for c in rig.published.one("agent_phase_completed").get("tool_calls")}
    assert all(records[i]["is_error"] for i in ("c1", "c2", "c3", "c4"))
    assert "not of type 'integer'" in records["c3"]["error"]
    logged = [r for r in caplog.records if r.getMessage() == "tool_call_failed"]
    assert sorted(r.tool for r in logged) == ["calc__add", "calc__add", "calc__fail", "calc__nope"]
    assert all(r.seat == "alice" and r.turn_id == result.turn_id for r in logged)


async def test_a_huge_result_is_cut_for_the_model_and_clipped_in_the_record(rig, endpoint):
    endpoint.script = [Reply(body=openai_calls(("c1", "calc__big", {"size": 10_000_000}))),
                       Reply(body=chat_body("That was a lot."))]
    result = await rig.run(rig.company(servers=[stdio_entry("calc", rig.calls_file, call_timeout_seconds=60)]))
    assert result.outcome == "completed"
    [message] = tool_messages(endpoint.requests[1])
    assert message["content"].startswith("x" * MODEL_RESULT_CHARS)
    assert message["content"].endswith(f"[cut: the result was 10,000,000 characters; these are the first "
                                       f"{MODEL_RESULT_CHARS:,}]")
    [call] = rig.published.one("agent_phase_completed").get("tool_calls")
    assert (len(call["result"]), call["result_chars"], call["result_truncated"]) == (EVENT_RESULT_CHARS, 10_000_000, True)


async def test_a_server_that_crashes_mid_call_is_an_error_result_and_its_tools_are_withdrawn(rig, endpoint):
    endpoint.script = [Reply(body=openai_calls(("c1", "calc__crash", {}))),
                       Reply(body=chat_body("The tool died."))]
    result = await rig.run(rig.company())
    assert result.outcome == "completed"
    [message] = tool_messages(endpoint.requests[1])
    assert message["content"] == "Error: the tool server calc closed the connection during the call"
    assert "tools" not in endpoint.requests[1]["body"]  # the crashed server's tools are no longer offered


async def test_a_loop_that_never_ends_is_cut_by_the_default_max_iter_as_a_failed_turn(rig, endpoint):
    counter = iter(range(1000))
    endpoint.responder = lambda request: Reply(body=openai_calls((f"c{next(counter)}", "calc__add",
                                                                  {"a": next(counter), "b": 1})))
    company = rig.company()
    assert company.turns.max_iter == 25
    result = await rig.run(company)
    assert len(endpoint.requests) == 25
    assert (result.outcome, result.guard, result.rounds) == ("failed", "max_iter", 25)
    breach = rig.published.one("turn.guard_breach")
    assert (breach.get("guard"), breach.get("limit"), breach.get("iteration")) == ("max_iter", 25, 25)
    completed = rig.published.one("agent_turn_completed")
    assert (completed.get("outcome"), completed.get("failed"), completed.get("error_kind")) == ("failed", True, "max_iter")


async def test_a_seats_own_max_iter_overrides_the_companys(rig, endpoint):
    endpoint.responder = lambda request: Reply(body=openai_calls((f"c{len(endpoint.requests)}", "calc__add",
                                                                  {"a": len(endpoint.requests), "b": 1})))
    result = await rig.run(rig.company(alice={"max_iter": 3}))
    assert (result.guard, len(endpoint.requests)) == ("max_iter", 3)


async def test_the_same_call_repeated_stall_repeats_times_is_a_stall(rig, endpoint):
    endpoint.responder = lambda request: Reply(body=openai_calls((f"c{len(endpoint.requests)}", "calc__add",
                                                                  {"a": 1, "b": 1})))
    result = await rig.run(rig.company())
    assert (result.outcome, result.guard, len(endpoint.requests)) == ("failed", "stall", 3)
    assert len(rig.calls()) == 2  # the third repeat is not run
    assert rig.published.one("turn.guard_breach").get("detail") == "calc__add was called 3 times with the same arguments"


async def test_a_trigger_past_the_depth_cap_calls_no_model(rig, endpoint):
    trigger = slack_message().replace(delegation_depth=6)
    result = await rig.run(rig.company(), trigger)
    assert (result.outcome, result.guard, endpoint.requests) == ("failed", "depth_cap", [])
    breach = rig.published.one("turn.guard_breach")
    assert (breach.get("guard"), breach.get("limit")) == ("depth_cap", 5)


async def test_a_scheduled_tasks_turn_is_bounded_by_scheduled_timeout(rig, endpoint):
    endpoint.script = [Reply(body=openai_calls(("c1", "calc__slow", {"seconds": 4})))]
    with tracing.span("schedule.fire"):
        task = new(TaskAssigned(agent_handle="alice", task="standup", assigned_by="scheduler", schedule="standup"),
                   tracing.trace_of(), source="scheduler")
    company = rig.company(turns={"scheduled_timeout_seconds": 1})
    result = await rig.run(company, task)
    assert (result.outcome, result.guard) == ("failed", "scheduled_timeout")
    assert len(endpoint.requests) == 1
    # the same turn woken by a person's task is not bounded by it
    assert tool_company([openai_entry(endpoint)], []).turns.scheduled_timeout_seconds == 1800


async def test_a_lost_lease_ends_the_turn_before_its_next_round_and_runs_no_tool(rig, endpoint):
    endpoint.script = [Reply(body=openai_calls(("c1", "calc__add", {"a": 1, "b": 2})))]
    checks = []

    def fence() -> bool:
        checks.append(True)
        return len(checks) == 1  # held for round 1, lost before its tools

    result = await rig.run(rig.company(), fence=fence)
    assert (result.outcome, result.error_kind) == ("interrupted", "fence")
    assert rig.calls() == [] and len(endpoint.requests) == 1
    assert rig.published.one("agent_turn_completed").get("outcome") == "interrupted"


async def test_a_model_that_declines_fails_the_turn_naming_the_refusal(rig, endpoint):
    endpoint.script = [Reply(body=chat_body("I can't help with that.", finish_reason="content_filter"))]
    result = await rig.run(rig.company())
    assert (result.outcome, result.error_kind, result.model_refused) == ("failed", "refusal", True)
    phase = rig.published.one("agent_phase_completed")
    assert phase.get("refusal") == {"category": "", "explanation": "I can't help with that."}


async def test_a2a_ask_hands_the_question_over_and_ends_the_turn(rig, endpoint):
    endpoint.script = [Reply(body=openai_calls(("c1", "a2a_ask", {"seat": "bob", "question": "Which branch?"}),
                                               text="Asking bob."))]
    result = await rig.run(rig.company(), asker=True)
    [ask] = rig.asks
    assert (ask.asker.handle, ask.target.handle, ask.question, ask.depth, ask.turn_id) == \
        ("alice", "bob", "Which branch?", 1, result.turn_id)
    assert (result.outcome, result.rounds, result.response, result.tools_used) == \
        ("completed", 1, "Asking bob.", ["a2a_ask"])
    assert len(endpoint.requests) == 1  # ask, then the turn ends
    assert "a2a_ask" in [t["function"]["name"] for t in endpoint.requests[0]["body"]["tools"]]


@pytest.mark.parametrize("arguments, says", [
    ({"seat": "maya", "question": "?"}, "'maya' is a human seat"),
    ({"seat": "zed", "question": "?"}, "'zed' is no seat of the company"),
    ({"seat": "alice", "question": "?"}, "'alice' is you"),
    ({"seat": "bob", "question": "x" * (64 * 1024 + 1)}, "brief: 65,537 bytes is over the 65,536-byte limit"),
])
async def test_a2a_ask_refusals_are_results_the_model_reads(rig, endpoint, arguments, says):
    endpoint.script = [Reply(body=openai_calls(("c1", "a2a_ask", arguments))), Reply(body=chat_body("Understood."))]
    result = await rig.run(rig.company(), asker=True)
    assert rig.asks == [] and result.outcome == "completed"
    [message] = tool_messages(endpoint.requests[1])
    assert message["content"].startswith("Error: a2a_ask refused: ") and says in message["content"]


async def test_a2a_ask_past_the_depth_cap_is_refused_as_a_result(rig, endpoint):
    endpoint.script = [Reply(body=openai_calls(("c1", "a2a_ask", {"seat": "bob", "question": "?"}))),
                       Reply(body=chat_body("I'll answer myself."))]
    result = await rig.run(rig.company(), slack_message().replace(delegation_depth=5), asker=True)
    assert rig.asks == [] and result.outcome == "completed"
    assert "this ask would be hop 6 of a chain of asks, past the cap of 5" in tool_messages(endpoint.requests[1])[0]["content"]


async def test_without_an_a2a_service_a2a_ask_is_not_offered(rig, endpoint):
    endpoint.script = [Reply(body=chat_body("ok"))]
    await rig.run(rig.company())
    assert "a2a_ask" not in [t["function"]["name"] for t in endpoint.requests[0]["body"]["tools"]]


async def test_the_scripted_model_uses_the_notes_tool_offline(rig):
    scripted = {"name": "local", "kind": "scripted", "reply": "On it. ({trigger_summary})",
                "tool_calls": [{"server": "calc", "tool": "append", "arguments": {"text": "{trigger_summary}"}}]}
    trigger = slack_message()
    result = await rig.run(rig.company(scripted), trigger)
    assert [c["arguments"] for c in rig.calls()] == [{"text": trigger.summary()}]
    assert (result.outcome, result.rounds, result.tools_used) == ("completed", 2, ["calc__append"])
    [call] = rig.published.one("agent_phase_completed").get("tool_calls")
    assert call["result"] == f"stored: {trigger.summary()}"


async def test_a_timing_per_round_separates_the_model_the_tools_and_the_engine(rig, endpoint):
    endpoint.script = [Reply(body=openai_calls(("c1", "calc__add", {"a": 1, "b": 2}))), Reply(body=chat_body("3"))]
    result = await rig.run(rig.company())
    first, second = result.timings
    assert first.provider_s > 0 and first.tools_s > 0 and first.engine_s >= 0
    assert first.round_s >= first.provider_s + first.tools_s
    assert second.tools_s == 0
    assert json.dumps(rig.published.one("agent_phase_completed").get("rounds"))  # the record stays JSON


async def test_a_tool_of_a_streamable_http_server_is_called_in_a_turn(rig, endpoint, tmp_path):
    server = HttpToolServer(tmp_path / "http.calls").start()
    try:
        endpoint.script = [Reply(body=openai_calls(("c1", "remote__append", {"text": "over http"}))),
                           Reply(body=chat_body("Stored remotely."))]
        company = rig.company(servers=[{"name": "remote", "transport": "http", "url": server.url}])
        result = await rig.run(company)
    finally:
        server.stop()
    assert [(c["tool"], c["arguments"]) for c in calls(tmp_path / "http.calls")] == [("append", {"text": "over http"})]
    assert tool_messages(endpoint.requests[1]) == [{"role": "tool", "tool_call_id": "c1", "content": "stored: over http"}]
    assert (result.outcome, result.tools_used) == ("completed", ["remote__append"])
