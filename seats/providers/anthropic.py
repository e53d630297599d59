"""The Anthropic provider: `kind: anthropic` (DESIGN.md, deliberate difference 4: "the Messages
API"), through the official `anthropic` SDK (which sends `x-api-key` and `anthropic-version`).

One `complete` is one POST to `{base_url}/v1/messages`. Our messages become the Messages API's
shape: the system text is the `system` parameter, an assistant message's tool calls are
`tool_use` blocks, and the tool results that follow it are `tool_result` blocks (with
`is_error`) in one user message. The system text and the tool definitions are marked for the
prompt cache, since a tool loop re-sends both on every round. Usage reports input tokens apart
from cache writes (`cache_creation_input_tokens`) and reads (`cache_read_input_tokens`):
`tokens_in` is their sum, what the round's prompt was, and each is kept on its own field.
Retries follow `retries.py`.
"""
from __future__ import annotations

from typing import Any, Sequence


from engine.config.company import Anthropic
from seats.providers.base import Completion, Message, ProviderError, ToolCall, ToolSpec
from seats.providers.clients import Clients
from seats.providers.sdk import SdkProvider

# The Messages API's stop_reason in the seed's words (seed 000, agent_phase_completed).
STOP_REASONS = {
    "end_turn": "end",
    "stop_sequence": "end",
    "max_tokens": "max_tokens",
    "tool_use": "tool_use",
    "refusal": "refusal",
    "pause_turn": "paused",
    "model_context_window_exceeded": "context_exceeded",
}
CACHED = {"type": "ephemeral"}


class AnthropicProvider(SdkProvider):
    """A Provider over Anthropic's Messages API (or an endpoint that speaks it)."""

    SDK = "anthropic"
    config: Anthropic

    async def complete(self, messages: list[Message], *, max_tokens: int,
                       tools: Sequence[ToolSpec] = ()) -> Completion:
        """One Messages API call, with the retries; ProviderError when there is none."""
        client = self.clients.anthropic(self.config)
        system, turns = wire_messages(messages)
        body: dict[str, Any] = {"model": self.config.model, "max_tokens": max_tokens, "messages": turns}
        if system:
            body["system"] = [{"type": "text", "text": system, "cache_control": CACHED}]
        if tools:
            body["tools"] = [wire_tool(t) for t in tools]
            body["tools"][-1]["cache_control"] = CACHED  # the cache covers every tool up to the mark
        if not self.config.api_key:
            body["extra_headers"] = Clients.no_key_headers(self.sdk, self.config, "X-Api-Key")

        async def attempt() -> Completion:
            return self._completion(await client.messages.create(**body))

        try:
            return await self.retrying.call(attempt)
        except ValueError:  # the SDK could not decode the body as JSON
            raise self.retrying.error("bad_response", "the body is not JSON") from None

    def _completion(self, answer: Any) -> Completion:
        """The SDK's answer as a Completion; ProviderError(bad_response) naming what is missing."""
        blocks = getattr(answer, "content", None)
        if not isinstance(blocks, list):
            raise self._bad("the body has no content blocks")
        texts, calls = [], []
        for i, block in enumerate(blocks):
            kind = getattr(block, "type", None)
            if kind == "text":
                text = getattr(block, "text", None)
                if not isinstance(text, str):
                    raise self._bad(f"content[{i}].text is not text")
                texts.append(text)
            elif kind == "tool_use":
                arguments = getattr(block, "input", None)
                call_id, name = getattr(block, "id", None) or f"toolu_{i}", getattr(block, "name", None) or ""
                if isinstance(arguments, dict):
                    calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
                else:
                    calls.append(ToolCall(id=call_id, name=name, problem="the input is not a JSON object"))
        stop_reason = STOP_REASONS.get(getattr(answer, "stop_reason", None) or "", "")
        usage = getattr(answer, "usage", None)
        fresh, out = _count(usage, "input_tokens"), _count(usage, "output_tokens")
        written, read = _count(usage, "cache_creation_input_tokens"), _count(usage, "cache_read_input_tokens")
        model = getattr(answer, "model", None)
        return Completion(text="".join(texts), tokens_in=fresh + written + read, tokens_out=out,
                          stop_reason=stop_reason, tool_calls=tuple(calls),
                          model=model if isinstance(model, str) and model else self.config.model,
                          cache_read_tokens=read, cache_write_tokens=written)

    def _bad(self, message: str) -> ProviderError:
        return self.retrying.error("bad_response", message)


def wire_messages(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """Our messages as (the system text, the Messages API's turns). Consecutive turns of one
    role are merged into one, as the API reads them."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in messages:
        role, text = message.get("role"), str(message.get("content") or "")
        if role == "system":
            system.append(text)
        elif role == "user":
            add("user", [{"type": "text", "text": text or "(empty)"}])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                       for c in message.get("tool_calls") or ()]
            add("assistant", blocks or [{"type": "text", "text": "(no reply)"}])
        elif role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": text or "(no output)",
                          "is_error": bool(message.get("is_error"))}])
    return "\n\n".join(system), turns


def wire_tool(tool: ToolSpec) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


def _count(usage: Any, name: str) -> int:
    value = getattr(usage, name, None)
    return value if isinstance(value, int) else 0
