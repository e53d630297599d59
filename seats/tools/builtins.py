"""The engine's built-in tools, the model sees them beside the MCP servers' (DESIGN.md,
deliberate difference 4: "the engine's built-in tools (`a2a_ask`)"; seed 000, "Communication":
agents ask each other through ephemeral A2A channels).

One registry, `BUILTINS`, name -> Builtin. A built-in is offered only when what it needs is
wired: `a2a_ask` needs an `Asker`, the A2A service's door (it opens the channel and wakes the
asked seat). What the engine itself decides about an ask is here, so a refusal reaches the
model as a tool result it can read and act on: an unknown seat, a human seat, the asker
itself, an empty or oversized question, and an ask past the delegation depth cap (the asked
turn would run at the trigger's depth plus one).

`a2a_ask` ends the turn once the ask is sent ("ask, then end the turn"): the answer arrives
later as a new message in the asker's inbox, in a turn of its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from engine.config.company import Company, Seat
from events.envelope import Event
from seats.providers.base import ToolSpec

MAX_QUESTION_CHARS = 20_000  # a question is the asked turn's prompt, as a task is (seats.tasks)


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
    """The A2A service's door: send the ask; returns a receipt the model reads (a channel id)."""

    async def __call__(self, ask: Ask) -> str: ...


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
    target = company.seat_by_handle(handle)
    if target is None:
        agents = ", ".join(s.handle for s in company.agent_seats() if s.handle != me.handle) or "none"
        return _refused(f"seat: {handle!r} is no seat of {company.name} (agent seats: {agents})")
    if not target.is_agent:
        return _refused(f"seat: {handle!r} is a human seat; reach people through your own tools")
    if target.handle == me.handle:
        return _refused("seat: you cannot ask yourself")
    if not question:
        return _refused("question: say what you are asking")
    if len(question) > MAX_QUESTION_CHARS:
        return _refused(f"question: at most {MAX_QUESTION_CHARS:,} characters (this one has {len(question):,})")
    depth = context.trigger.delegation_depth + 1
    cap = company.turns.depth_cap
    if depth > cap:
        return _refused(f"the delegation depth cap is {cap}, and this ask would be depth {depth}: "
                        "answer with what you have instead")
    if context.asker is None:
        return BuiltinResult(text="a2a_ask: asking other agents is not available on this node", is_error=True)
    receipt = await context.asker(Ask(company=company, asker=me, target=target, question=question,
                                      trigger=context.trigger, turn_id=context.turn_id, depth=depth))
    return BuiltinResult(text=f"asked {target.handle}; the answer will arrive as a new message ({receipt}). "
                              "Your turn ends here.", ends_turn=True)


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
