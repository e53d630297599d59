"""The OpenAI-compatible provider: `kind: openai` (DESIGN.md, deliberate difference 4: "any
OpenAI-compatible chat-completions endpoint"), through the official `openai` SDK.

One `complete` is one chat completion at `{base_url}/chat/completions` with the model, the
messages, `max_tokens` and, when the turn offers any, `tools` (function tools); the api key
goes as a Bearer token, every phase of the request bounded by `timeout_seconds`. The model's
`tool_calls` come back as ToolCalls; a call whose `arguments` are not a JSON object keeps the
reason, and the turn answers it with that instead of running it. Usage comes from the
response's `usage` block, cached prompt tokens (`prompt_tokens_details.cached_tokens`) as
cache reads. Retries follow `retries.py`.
"""
from __future__ import annotations

import json
from typing import Any, Sequence


from engine.config.company import OpenAI
from seats.providers.base import Completion, Message, ProviderError, ToolCall, ToolSpec, message_text
from seats.providers.clients import Clients
from seats.providers.sdk import SdkProvider
from seats.providers.scripted import approx_tokens

# OpenAI's finish_reason in the seed's stop_reason words (seed 000, agent_phase_completed).
FINISH_REASONS = {
    "stop": "end",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


class OpenAIProvider(SdkProvider):
    """A Provider over one OpenAI-compatible endpoint. `clients` shares SDK clients between
    turns (a private one when None, built with `http_client_factory`)."""

    SDK = "openai"
    config: OpenAI

    async def complete(self, messages: list[Message], *, max_tokens: int,
                       tools: Sequence[ToolSpec] = ()) -> Completion:
        """One chat completion, with the retries; ProviderError when there is none."""
        client = self.clients.openai(self.config)
        body: dict[str, Any] = {"model": self.config.model, "messages": wire_messages(messages),
                                "max_tokens": max_tokens}
        if tools:
            body["tools"] = [wire_tool(t) for t in tools]
        if not self.config.api_key:
            body["extra_headers"] = Clients.no_key_headers(self.sdk, self.config, "Authorization")

        async def attempt() -> Completion:
            answer = await client.chat.completions.create(**body)
            return self._completion(answer, messages)

        try:
            return await self.retrying.call(attempt)
        except ValueError:  # the SDK could not decode the body as JSON
            raise self.retrying.error("bad_response", "the body is not JSON") from None

    def _completion(self, answer: Any, messages: list[Message]) -> Completion:
        """The SDK's answer as a Completion; ProviderError(bad_response) naming what is missing."""
        choices = getattr(answer, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise self._bad("the body has no choices[0]")
        message = getattr(choices[0], "message", None)
        if message is None:
            raise self._bad("choices[0] has no message")
        content, refusal = getattr(message, "content", None), getattr(message, "refusal", None)
        if content is not None and not isinstance(content, str):
            raise self._bad("choices[0].message.content is not text")
        calls = tuple(_tool_call(c, i) for i, c in enumerate(getattr(message, "tool_calls", None) or ()))
        stop_reason = FINISH_REASONS.get(getattr(choices[0], "finish_reason", None) or "", "")
        if calls and stop_reason in ("", "end"):
            stop_reason = "tool_use"  # some endpoints say "stop" beside the calls they ask for
        if isinstance(refusal, str) and refusal:
            content, stop_reason, calls = refusal, "refusal", ()
        text = content or ""
        usage = getattr(answer, "usage", None)
        tokens_in, tokens_out = getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)
        # An endpoint that reports no usage is still billing someone: estimate rather than
        # let its rounds pass the budget for free.
        if not isinstance(tokens_in, int):
            tokens_in = approx_tokens("".join(message_text(m) for m in messages))
        if not isinstance(tokens_out, int):
            tokens_out = approx_tokens(text + message_text({"tool_calls": calls}))
        cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None)
        model = getattr(answer, "model", None)
        return Completion(text=text, tokens_in=tokens_in, tokens_out=tokens_out, stop_reason=stop_reason,
                          model=model if isinstance(model, str) and model else self.config.model,
                          tool_calls=calls, cache_read_tokens=cached if isinstance(cached, int) else 0)

    def _bad(self, message: str) -> ProviderError:
        return self.retrying.error("bad_response", message)


def wire_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Our messages in the chat-completions shape (system and user ones are that already)."""
    out = []
    for message in messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            out.append({"role": "assistant", "content": message.get("content") or None,
                        "tool_calls": [{"id": c.id, "type": "function",
                                        "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                                       for c in message["tool_calls"]]})
        elif role == "assistant":
            out.append({"role": "assistant", "content": message.get("content") or ""})
        elif role == "tool":
            out.append({"role": "tool", "tool_call_id": message["tool_call_id"], "content": message.get("content") or ""})
        else:
            out.append({"role": role, "content": message.get("content") or ""})
    return out


def wire_tool(tool: ToolSpec) -> dict[str, Any]:
    return {"type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}}


def _tool_call(call: Any, index: int) -> ToolCall:
    """One of the model's tool_calls; arguments that are no JSON object are kept as the problem."""
    function = getattr(call, "function", None)
    name = getattr(function, "name", None) or ""
    call_id = getattr(call, "id", None) or f"call_{index + 1}"
    raw = getattr(function, "arguments", None)
    if raw in (None, ""):
        return ToolCall(id=call_id, name=name)
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        return ToolCall(id=call_id, name=name, problem=f"the arguments are not JSON ({exc.msg})")
    if not isinstance(arguments, dict):
        return ToolCall(id=call_id, name=name, problem="the arguments are not a JSON object")
    return ToolCall(id=call_id, name=name, arguments=arguments)
