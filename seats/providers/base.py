"""The model provider contract (DESIGN.md, deliberate difference 4: "our turn engine calls a
model provider"; seed 000, "Event Types": `agent_phase_completed` rounds and their
`stop_reason`, `provider_fallback`, `llm_unavailable`).

A provider answers one chat completion: `complete(messages, *, max_tokens) -> Completion`.
`messages` is the OpenAI chat shape, `[{"role": "system"|"user"|"assistant", "content": str}]`,
because that is what the one remote kind speaks and what the scripted kind can read as text.

A provider that cannot answer raises `ProviderError` with a `kind` from `KINDS`; anything else
it raises is a bug in the provider and propagates (the host records turn.guard_breach). The
fallback chain (`chain.py`) turns a ProviderError into a hand-off to the next member.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

Message = dict[str, str]

# Why a provider gave up. `retryable` says whether the same call might work later (the
# condition is transient) -- not whether this provider already retried it.
KINDS: dict[str, bool] = {
    "auth": False,          # 401/403: the credential is wrong; trying again cannot help
    "bad_request": False,   # another 4xx: the request itself is refused
    "rate_limited": True,   # 429 after the provider's own retries
    "server": True,         # 5xx after the provider's own retries
    "timeout": True,        # no answer inside timeout_seconds
    "unreachable": True,    # could not connect after the provider's own retries
    "bad_response": False,  # an answer that is not a chat completion
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
class Completion:
    """One provider call's answer: the reply text, its token counts as the provider billed
    them, the seed's `stop_reason`, and the model that answered."""

    text: str
    tokens_in: int
    tokens_out: int
    stop_reason: str
    model: str


@runtime_checkable
class Provider(Protocol):
    """One member of `company.providers.llm`, ready to call. `key` is its configured name."""

    key: str
    model: str

    async def complete(self, messages: list[Message], *, max_tokens: int) -> Completion:
        """Answer the conversation; ProviderError when it cannot."""
        ...
