"""The fallback chain over `company.providers.llm` (seed 000, "Event Types": provider_fallback,
llm_unavailable; DESIGN.md, deliberate difference 4).

Each round walks the chain from its first member, in the order the company lists them. A
member that raises ProviderError hands the call to the next, and the hand-off is published as
`provider_fallback` -- one per provider CALL, not per phase, so a member that keeps failing is
a hand-off on every round -- with `to_provider_key` empty on the last member, where the next
event is `llm_unavailable` and the call raises ChainExhausted. Each member's call runs in its
own `llm.round` span, so its fallback event is addressed to that call.

An empty chain is never called: a company with no provider has its seats' inboxes held by the
host instead, so calling one is a caller's bug (ChainEmpty).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Awaitable, Callable, Sequence

from engine.config.company import Anthropic, Company, Scripted
from events import tracing
from events.envelope import EventData
from events.types.system import LLMUnavailable, ProviderFallback
from seats.providers.anthropic import AnthropicProvider
from seats.providers.base import Completion, Message, Provider, ProviderError, ToolSpec
from seats.providers.clients import ClientFactory, Clients
from seats.providers.openai import OpenAIProvider
from seats.providers.scripted import ScriptedProvider

Emit = Callable[[EventData], Awaitable[None]]


class ChainEmpty(RuntimeError):
    """A chain with no members was called; the host should have held the inbox."""

    def __init__(self) -> None:
        super().__init__("provider: the company has no model provider (providers.llm is empty); "
                         "the seat's inbox is held rather than a turn run")


class ChainExhausted(Exception):
    """Every member failed; `errors` holds each member's ProviderError, in chain order."""

    def __init__(self, errors: list[ProviderError]) -> None:
        self.errors = errors
        last = errors[-1] if errors else None
        super().__init__(f"provider: the fallback chain is exhausted"
                         f"{': ' + last.detail if last else ''}")

    @property
    def last(self) -> ProviderError:
        return self.errors[-1]

    @property
    def transient(self) -> bool:
        """Whether every member failed for a reason that may pass (429, 5xx, timeout,
        unreachable): only then is the same call worth making again later."""
        return bool(self.errors) and all(e.retryable for e in self.errors)


@dataclass(frozen=True)
class Answer:
    """A round's completion and the chain member that gave it."""

    completion: Completion
    provider_key: str


def members_for(company: Company, *, variables: Mapping[str, str] | None = None,
                clients: Clients | None = None, http_client_factory: ClientFactory | None = None) -> list[Provider]:
    """The company's providers, built in chain order. `variables` fill a scripted reply;
    `clients` are the SDK clients the remote kinds share (private ones when None)."""
    clients = clients or Clients(http_client_factory)
    members: list[Provider] = []
    for config in company.providers.llm:
        if isinstance(config, Scripted):
            members.append(ScriptedProvider(config, variables=variables))
        elif isinstance(config, Anthropic):
            members.append(AnthropicProvider(config, clients=clients))
        else:
            members.append(OpenAIProvider(config, clients=clients))
    return members


class ProviderChain:
    """Calls its members in order until one answers. `emit` publishes an event's typed body
    (the turn stamps its seat and turn fields and the current trace on it)."""

    def __init__(self, members: list[Provider], *, emit: Emit, phase: str = "", iteration: int = 0) -> None:
        self.members = list(members)
        self.emit = emit
        self.phase = phase
        self.iteration = iteration

    @property
    def keys(self) -> list[str]:
        return [m.key for m in self.members]

    async def complete(self, messages: list[Message], *, max_tokens: int, round: int = 0,
                       tools: Sequence[ToolSpec] = ()) -> Answer:
        """The first member's answer that comes; ChainExhausted (after llm_unavailable) when none does.
        `tools` are offered to whichever member answers."""
        if not self.members:
            raise ChainEmpty()
        errors: list[ProviderError] = []
        for i, member in enumerate(self.members):
            after = self.members[i + 1].key if i + 1 < len(self.members) else ""
            with tracing.span("llm.round", provider=member.key, model=member.model, round=round):
                try:
                    completion = await member.complete(messages, max_tokens=max_tokens, tools=tools)
                except ProviderError as exc:
                    errors.append(exc)
                    await self.emit(ProviderFallback(
                        phase=self.phase, iteration=self.iteration, round=round,
                        from_provider_key=member.key, to_provider_key=after,
                        error=exc.detail, error_kind=exc.kind))
                    continue
            return Answer(completion=completion, provider_key=member.key)
        await self.emit(LLMUnavailable(phase=self.phase, providers=self.keys,
                                       error=errors[-1].detail, error_kind=errors[-1].kind))
        raise ChainExhausted(errors)
