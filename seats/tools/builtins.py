"""The engine's built-in tools, the model sees them beside the MCP servers' (DESIGN.md,
deliberate difference 4: "the engine's built-in tools (`a2a_ask`)"; seed 000, "Communication":
agents ask each other through ephemeral A2A channels).

One registry, `BUILTINS`, name -> Builtin. A built-in is offered only when what it needs is
wired: `a2a_ask` needs an `Asker`, the A2A service's door (it opens the channel and wakes the
asked seat). The rules an ask meets are the A2A app's (`a2a.service.ask_refusal`), checked
here before anything is sent, so a refusal reaches the model as a tool result it can read and
act on: an unknown seat, a human seat, the asker itself, an empty or oversized question, and
an ask past the company's `turns.depth_cap` (the asked turn would run at the trigger's depth
plus one).

`a2a_ask` ends the turn once the ask is sent ("ask, then end the turn"): the answer arrives
later as a new message in the asker's inbox, in a turn of its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from a2a.service import AskOutcome, ask_refusal
from engine.config.company import Company, Seat
from events.envelope import Event
from seats.providers.base import ToolSpec


@dataclass(frozen=True)
class Ask:
    """One ask, checked: who asks whom what, from which turn and trigger, at which depth."""

    company: Company
    asker: Seat
    target: Seat
    question: str
    trigger: Event
    turn_id: str
    depth: int


class Asker(Protocol):
    """The A2A service's door: send the ask (already checked); what it came to, whose `text`
    the model reads."""

    async def __call__(self, ask: Ask) -> AskOutcome: ...


@dataclass(frozen=True)
class BuiltinContext:
    """What a built-in may read of the turn calling it."""

    company: Company
    seat: Seat
    trigger: Event
    turn_id: str
    asker: Asker | None = None


@dataclass(frozen=True)
class BuiltinResult:
    """A built-in's answer: the text the model reads, whether it is a refusal, and whether the
    turn ends after this round."""

    text: str
    is_error: bool = False
    ends_turn: bool = False


@dataclass(frozen=True)
class Builtin:
    spec: ToolSpec
    run: Callable[[BuiltinContext, dict[str, Any]], Awaitable[BuiltinResult]]
    needs_asker: bool = False


def _refused(text: str) -> BuiltinResult:
    return BuiltinResult(text=f"a2a_ask refused: {text}", is_error=True)


async def a2a_ask(context: BuiltinContext, arguments: dict[str, Any]) -> BuiltinResult:
    """Check the ask, hand it to the A2A service, and end the turn."""
    company, me = context.company, context.seat
    handle = str(arguments.get("seat") or "").strip().lstrip("@")
    question = str(arguments.get("question") or "").strip()
    if not handle:
        return _refused("seat: name the seat to ask")
    refusal = ask_refusal(company, asker=me.handle, target=handle, brief=question, depth=context.trigger.delegation_depth)
    if refusal is not None:
        return BuiltinResult(text=refusal.text, is_error=True)
    if context.asker is None:
        return BuiltinResult(text="a2a_ask: asking other agents is not available on this node", is_error=True)
    target = company.seat_by_handle(handle)
    outcome = await context.asker(Ask(company=company, asker=me, target=target, question=question,
                                      trigger=context.trigger, turn_id=context.turn_id,
                                      depth=context.trigger.delegation_depth + 1))
    if not outcome.ok:
        return BuiltinResult(text=outcome.text, is_error=True)
    return BuiltinResult(text=f"{outcome.text}. Your turn ends here.", ends_turn=True)


BUILTINS: dict[str, Builtin] = {
    "a2a_ask": Builtin(
        spec=ToolSpec(
            name="a2a_ask",
            description=("Ask another agent seat of your company a question. Your turn ends once the question "
                         "is sent; the answer arrives later as a new message to you."),
            input_schema={"type": "object",
                          "properties": {"seat": {"type": "string", "description": "the handle of the seat to ask"},
                                         "question": {"type": "string",
                                                      "description": "the question, with the context they need"}},
                          "required": ["seat", "question"]}),
        run=a2a_ask, needs_asker=True),
}


def builtins_for(asker: Asker | None) -> list[Builtin]:
    """The built-ins a turn is offered: those whose needs are wired on this node."""
    return [b for b in BUILTINS.values() if asker is not None or not b.needs_asker]
