"""The model provider contract (DESIGN.md, deliberate difference 4: "our turn engine runs a tool
loop against a model provider"; seed 000, "Event Types": `agent_phase_completed` rounds and
their `stop_reason`, `provider_fallback`, `llm_unavailable`).

A provider answers one round: `complete(messages, *, max_tokens, tools) -> Completion`.

`messages` is one shape every kind reads, close to the OpenAI chat shape because that is the
one most endpoints speak, and each remote kind translates it to its own wire format:

    {"role": "system", "content": str}
    {"role": "user", "content": str}
    {"role": "assistant", "content": str, "tool_calls": [ToolCall, ...]}    (tool_calls optional)
    {"role": "tool", "tool_call_id": str, "name": str, "content": str, "is_error": bool}

Tool results follow the assistant message that asked for them, one per call, in the order of
the calls. `tools` are the ToolSpecs the model may call this round.

A provider that cannot answer raises `ProviderError` with a `kind` from `KINDS`; anything else
it raises is a bug in the provider and propagates (the host abandons the turn). The fallback
chain (`chain.py`) turns a ProviderError into a hand-off to the next member.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

Message = dict[str, Any]

# Why a provider gave up. `retryable` says whether the same call might work later (the
# condition is transient) -- not whether this provider already retried it.
KINDS: dict[str, bool] = {
    "auth": False,          # 401/403: the credential is wrong; trying again cannot help
    "bad_request": False,   # another 4xx: the request itself is refused
    "rate_limited": True,   # 429 after the provider's own retries
    "server": True,         # 5xx after the provider's own retries
    "timeout": True,        # no answer inside timeout_seconds
    "unreachable": True,    # could not connect after the provider's own retries
    "bad_response": False,  # an answer that is not a completion
}

# The seed's stop reasons (seed 000, agent_phase_completed): end, tool_use, max_tokens,
# refusal, context_exceeded, paused.
STOP_REASONS = ("end", "tool_use", "max_tokens", "refusal", "context_exceeded", "paused")


class ProviderError(Exception):
    """A provider call that produced no completion. `kind` is one of KINDS; `status` keeps the
    HTTP status when there was one; `provider_key` names the chain member."""

    def __init__(self, kind: str, message: str, *, retryable: bool | None = None,
                 status: int | None = None, provider_key: str = "") -> None:
        if kind not in KINDS:
            raise ValueError(f"provider error kind {kind!r} is not one of {sorted(KINDS)}")
        self.kind = kind
        self.retryable = KINDS[kind] if retryable is None else retryable
        self.status = status
        self.provider_key = provider_key
        super().__init__(f"provider: {provider_key + ': ' if provider_key else ''}{kind}: {message}")

    @property
    def detail(self) -> str:
        """The message without the `provider: ` prefix, for an event's `error` field."""
        return str(self).removeprefix("provider: ")


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: the name it calls it by, what it does, and the JSON schema
    of its arguments (an object schema)."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for. `arguments` is the decoded object; `problem` says why
    the model's arguments could not be read as one (they are then `{}` and the call is answered
    with that problem instead of being run)."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    problem: str = ""


@dataclass(frozen=True)
class Completion:
    """One provider call's answer: the reply text, the tool calls it asks for, its token counts
    as the provider billed them (cache reads and writes where the API reports them, already
    inside `tokens_in`), the seed's `stop_reason`, and the model that answered."""

    text: str
    tokens_in: int
    tokens_out: int
    stop_reason: str
    model: str
    tool_calls: tuple[ToolCall, ...] = ()
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@runtime_checkable
class Provider(Protocol):
    """One member of `company.providers.llm`, ready to call. `key` is its configured name."""

    key: str
    model: str

    async def complete(self, messages: list[Message], *, max_tokens: int,
                       tools: Sequence[ToolSpec] = ()) -> Completion:
        """Answer the conversation; ProviderError when it cannot."""
        ...


def system_message(text: str) -> Message:
    return {"role": "system", "content": text}


def user_message(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant_message(text: str, calls: Sequence[ToolCall] = ()) -> Message:
    message: Message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def tool_message(call: ToolCall, content: str, *, is_error: bool = False) -> Message:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content, "is_error": is_error}


def message_text(message: Message) -> str:
    """Everything a message says, as text: its content and its calls' names and arguments (what
    a token estimate and a prompt's size measure)."""
    out = str(message.get("content") or "")
    for call in message.get("tool_calls") or ():
        out += call.name + json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))
    return out
