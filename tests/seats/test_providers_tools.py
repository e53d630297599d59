"""Tool calling in both remote kinds (DESIGN.md, deliberate difference 4): `openai` (chat
completions `tools` / `tool_calls`) and `anthropic` (the Messages API's `tool_use` /
`tool_result` blocks, `x-api-key`, `anthropic-version`), each through its official SDK against a
real endpoint on 127.0.0.1, and the scripted kind's scripted tool calls."""
from __future__ import annotations

import pytest

from seats.providers import AnthropicProvider, OpenAIProvider, ProviderError, ScriptedProvider, ToolCall, ToolSpec
from seats.providers.base import assistant_message, system_message, tool_message, user_message
from tests.seats.test_providers import (
    API_KEY,
    Reply,
    Waits,
    chat_body,
    company_of,
    endpoint,  # noqa: F401  (the fixture)
    openai_entry,
)
from tests.seats.tooling import anthropic_answer, headers_of, openai_calls, text_block, tool_use

pytestmark = pytest.mark.timeout(30)

ADD = ToolSpec(name="calc__add", description="Add two integers.",
               input_schema={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                             "required": ["a", "b"]})
CALL = ToolCall(id="call_9", name="calc__add", arguments={"a": 2, "b": 3})
CONVERSATION = [system_message("You are alice."), user_message("What is 2 + 3?"),
                assistant_message("Let me add.", [CALL]), tool_message(CALL, "5")]


def anthropic_provider(base_url: str, waits: Waits | None = None, **settings) -> AnthropicProvider:
    entry = {"name": "claude", "kind": "anthropic", "base_url": base_url, "model": "claude-test",
             "api_key": "${LLM_KEY}", **settings}
    return AnthropicProvider(company_of([entry]).providers.llm[0], sleep=waits or Waits(), jitter=lambda: 0.0)


def openai_provider(base_url: str, **settings) -> OpenAIProvider:
    return OpenAIProvider(company_of([openai_entry(base_url, **settings)]).providers.llm[0], sleep=Waits(),
                          jitter=lambda: 0.0)


def origin(endpoint) -> str:
    return endpoint.base_url.removesuffix("/v1")


# -- openai -----------------------------------------------------------------------------------

async def test_openai_offers_the_tools_and_reads_the_calls_the_model_asks_for(endpoint):
    endpoint.script = [Reply(body=openai_calls(("call_1", "calc__add", {"a": 1, "b": 2}),
                                               ("call_2", "calc__add", '{"a": 3, "b": 4}'),
                                               usage={"prompt_tokens": 50, "completion_tokens": 9,
                                                      "prompt_tokens_details": {"cached_tokens": 32}}))]
    done = await openai_provider(endpoint.base_url).complete(CONVERSATION[:2], max_tokens=100, tools=[ADD])
    assert done.stop_reason == "tool_use"
    assert done.tool_calls == (ToolCall("call_1", "calc__add", {"a": 1, "b": 2}),
                               ToolCall("call_2", "calc__add", {"a": 3, "b": 4}))
    assert (done.tokens_in, done.tokens_out, done.cache_read_tokens) == (50, 9, 32)
    [request] = endpoint.requests
    assert request["body"]["tools"] == [{"type": "function", "function": {
        "name": "calc__add", "description": "Add two integers.", "parameters": ADD.input_schema}}]


async def test_openai_sends_the_calls_and_their_results_back_in_its_own_shape(endpoint):
    endpoint.script = [Reply(body=chat_body("It is 5."))]
    done = await openai_provider(endpoint.base_url).complete(CONVERSATION, max_tokens=100, tools=[ADD])
    assert (done.text, done.stop_reason, done.tool_calls) == ("It is 5.", "end", ())
    messages = endpoint.requests[0]["body"]["messages"]
    assert messages[2] == {"role": "assistant", "content": "Let me add.", "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "calc__add", "arguments": '{"a": 2, "b": 3}'}}]}
    assert messages[3] == {"role": "tool", "tool_call_id": "call_9", "content": "5"}


async def test_openai_arguments_that_are_no_json_object_are_kept_as_the_calls_problem(endpoint):
    endpoint.script = [Reply(body=openai_calls(("c1", "calc__add", "{not json"), ("c2", "calc__add", "[1, 2]")))]
    done = await openai_provider(endpoint.base_url).complete(CONVERSATION[:2], max_tokens=100, tools=[ADD])
    first, second = done.tool_calls
    assert first.arguments == {} and first.problem.startswith("the arguments are not JSON")
    assert second.problem == "the arguments are not a JSON object"


async def test_openai_without_a_key_sends_no_authorization(endpoint):
    entry = {"name": "local", "kind": "openai", "base_url": endpoint.base_url, "model": "m"}
    provider = OpenAIProvider(company_of([entry]).providers.llm[0])
    await provider.complete(CONVERSATION[:2], max_tokens=10)
    assert "authorization" not in headers_of(endpoint.requests[0])


# -- anthropic --------------------------------------------------------------------------------

async def test_anthropic_speaks_the_messages_api_with_its_headers_tools_and_cache_marks(endpoint):
    endpoint.script = [Reply(body=anthropic_answer(text_block("Adding."), tool_use("toolu_1", "calc__add", {"a": 2, "b": 3}),
                                                   stop_reason="tool_use"))]
    done = await anthropic_provider(origin(endpoint)).complete(CONVERSATION[:2], max_tokens=256, tools=[ADD])
    assert (done.text, done.stop_reason, done.model) == ("Adding.", "tool_use", "claude-test")
    assert done.tool_calls == (ToolCall("toolu_1", "calc__add", {"a": 2, "b": 3}),)
    [request] = endpoint.requests
    assert request["path"] == "/v1/messages"
    headers = headers_of(request)
    assert headers["x-api-key"] == API_KEY and headers["anthropic-version"]
    assert "authorization" not in headers
    body = request["body"]
    assert (body["model"], body["max_tokens"]) == ("claude-test", 256)
    assert body["system"] == [{"type": "text", "text": "You are alice.", "cache_control": {"type": "ephemeral"}}]
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "What is 2 + 3?"}]}]
    assert body["tools"] == [{"name": "calc__add", "description": "Add two integers.",
                              "input_schema": ADD.input_schema, "cache_control": {"type": "ephemeral"}}]


async def test_anthropic_sends_tool_results_as_tool_result_blocks_marking_errors(endpoint):
    endpoint.script = [Reply(body=anthropic_answer(text_block("5, and the other failed.")))]
    second = ToolCall(id="toolu_2", name="calc__add", arguments={"a": "x"})
    conversation = [*CONVERSATION[:2], assistant_message("", [CALL, second]), tool_message(CALL, "5"),
                    tool_message(second, "Error: a: 'x' is not of type 'integer'", is_error=True)]
    done = await anthropic_provider(origin(endpoint)).complete(conversation, max_tokens=100, tools=[ADD])
    assert (done.text, done.stop_reason) == ("5, and the other failed.", "end")
    messages = endpoint.requests[0]["body"]["messages"]
    assert messages[1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "call_9", "name": "calc__add", "input": {"a": 2, "b": 3}},
        {"type": "tool_use", "id": "toolu_2", "name": "calc__add", "input": {"a": "x"}}]}
    assert messages[2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_9", "content": "5", "is_error": False},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "Error: a: 'x' is not of type 'integer'",
         "is_error": True}]}


async def test_anthropic_token_counts_include_cache_reads_and_writes(endpoint):
    endpoint.script = [Reply(body=anthropic_answer(text_block("ok"), usage={
        "input_tokens": 10, "output_tokens": 4, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 1200}))]
    done = await anthropic_provider(origin(endpoint)).complete(CONVERSATION[:2], max_tokens=100)
    assert (done.tokens_in, done.tokens_out, done.cache_write_tokens, done.cache_read_tokens) == (1510, 4, 300, 1200)


@pytest.mark.parametrize("reason, seed", [("max_tokens", "max_tokens"), ("refusal", "refusal"),
                                          ("model_context_window_exceeded", "context_exceeded")])
async def test_anthropic_stop_reasons_read_as_the_seeds(endpoint, reason, seed):
    endpoint.script = [Reply(body=anthropic_answer(text_block("..."), stop_reason=reason))]
    done = await anthropic_provider(origin(endpoint)).complete(CONVERSATION[:2], max_tokens=100)
    assert done.stop_reason == seed


async def test_anthropic_keeps_the_retry_rules_a_429_waits_its_retry_after_and_a_401_is_auth(endpoint):
    waits = Waits()
    endpoint.script = [Reply(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}},
                             {"Retry-After": "3"}),
                       Reply(body=anthropic_answer(text_block("there")))]
    done = await anthropic_provider(origin(endpoint), waits).complete(CONVERSATION[:2], max_tokens=10)
    assert done.text == "there" and waits.seconds == [3.0]
    endpoint.script = [Reply(401, {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}})]
    with pytest.raises(ProviderError) as info:
        await anthropic_provider(origin(endpoint)).complete(CONVERSATION[:2], max_tokens=10)
    assert (info.value.kind, info.value.status) == ("auth", 401) and "bad key" in str(info.value)
    assert API_KEY not in str(info.value)


async def test_anthropic_a_body_that_is_no_message_is_a_bad_response(endpoint):
    endpoint.script = [Reply(200, b"{not json")]
    with pytest.raises(ProviderError) as info:
        await anthropic_provider(origin(endpoint)).complete(CONVERSATION[:2], max_tokens=10)
    assert info.value.kind == "bad_response"


# -- scripted ---------------------------------------------------------------------------------

async def test_the_scripted_kind_asks_for_its_tool_calls_once_then_replies():
    entry = {"name": "demo", "kind": "scripted", "reply": "Noted: {trigger_summary}",
             "tool_calls": [{"server": "notes", "tool": "append", "arguments": {"text": "{trigger_summary}", "n": [1]}}]}
    config = company_of([entry], tools={"mcp": [{"name": "notes", "transport": "stdio", "command": ["x"]}]}
                        ).providers.llm[0]
    provider = ScriptedProvider(config, variables={"trigger_summary": "a bug"})
    first = await provider.complete(CONVERSATION[:2], max_tokens=100)
    assert (first.stop_reason, first.text) == ("tool_use", "")
    assert first.tool_calls == (ToolCall("call_1", "notes__append", {"text": "a bug", "n": [1]}),)
    answered = [*CONVERSATION[:2], assistant_message("", first.tool_calls), tool_message(first.tool_calls[0], "stored")]
    second = await provider.complete(answered, max_tokens=100)
    assert (second.stop_reason, second.text, second.tool_calls) == ("end", "Noted: a bug", ())
    assert await provider.complete(CONVERSATION[:2], max_tokens=100) == first  # deterministic


async def test_anthropic_without_a_key_sends_no_key(endpoint):
    endpoint.script = [Reply(body=anthropic_answer(text_block("ok")))]
    entry = {"name": "local", "kind": "anthropic", "base_url": origin(endpoint), "model": "m"}
    await AnthropicProvider(company_of([entry]).providers.llm[0]).complete(CONVERSATION[:2], max_tokens=10)
    assert "x-api-key" not in headers_of(endpoint.requests[0])
