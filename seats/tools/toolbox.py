"""One turn's toolbox: the tools its model is offered and the running of what it asks for
(DESIGN.md, deliberate difference 4; issue "Turns that act": "A tool error or timeout goes back
to the model as a tool result, never crashes the turn").

What a call meets, in order, each answered as a tool result the model reads:
  - the seat's lease no longer proven exclusive (seed 002: the turn loop re-checks the seat
    fence "again before each of that round's tool calls"): not run, and the turn ends;
  - arguments the model sent that are no JSON object, or a tool it was not offered: named;
  - arguments that do not match the tool's schema: named, field by field, and not sent;
  - a built-in: run here (`builtins.py`);
  - a server's tool: called through its connection, bounded by its call timeout.
The calls of one round run in parallel; their results come back in the order they were asked.
What the model reads of a result is capped at MODEL_RESULT_CHARS; what the events carry of it
at EVENT_RESULT_CHARS, with its full size beside it.
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from events import tracing
from seats.providers.base import ToolCall, ToolSpec
from seats.tools.builtins import Builtin, BuiltinContext
from seats.tools.remote import READY, RemoteTool

log = logging.getLogger("seats.tools")

MODEL_RESULT_CHARS = 50_000  # about 12,500 tokens: a result past this is cut, and the model is told
EVENT_RESULT_CHARS = 2_000   # what agent_phase_completed keeps of a result; its size is kept beside it
MAX_SCHEMA_ERRORS = 5        # how many schema mismatches one refusal names
EVENT_ARGUMENT_CHARS = 8_000  # arguments longer than this (as JSON) are clipped in the events


@dataclass
class ToolRun:
    """One call, run: what the model reads (`content`), and the record the events carry."""

    call: ToolCall
    server: str = ""
    tool: str = ""
    content: str = ""
    is_error: bool = False
    error: str = ""
    ends_turn: bool = False
    fenced: bool = False
    started_at: float = 0.0
    seconds: float = 0.0
    result_chars: int = 0
    full: str = field(default="", repr=False)

    def record(self, round_number: int) -> dict[str, Any]:
        """The call as agent_phase_completed's `tool_calls[]` holds it (and the inspect view reads)."""
        shown = self.full[:EVENT_RESULT_CHARS]
        return {
            "id": self.call.id, "round": round_number, "name": self.call.name, "server": self.server,
            "tool": self.tool, "arguments": _clipped(self.call.arguments),
            "started_at": datetime.fromtimestamp(self.started_at, timezone.utc).isoformat() if self.started_at else "",
            "duration_ms": round(self.seconds * 1000, 3), "is_error": self.is_error, "error": self.error,
            "result": shown, "result_chars": self.result_chars, "result_truncated": self.result_chars > len(shown),
        }


@functools.lru_cache(maxsize=1024)
def _validator(schema: str) -> Any:
    """A validator for a schema (its JSON text), or False when the schema itself is invalid.
    Checking a schema against its metaschema costs a millisecond, and every turn offers the same
    tools again, so validators are kept (a pure function of the schema, not state of a node)."""
    import jsonschema  # here: see seats/tools/remote.py (turns load it off the loop first)

    document = json.loads(schema)
    cls = jsonschema.validators.validator_for(document, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(document)
    except jsonschema.exceptions.SchemaError:
        return False
    return cls(document)


def _clipped(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments as the events keep them: whole, or their JSON's head when it is long."""
    text = json.dumps(arguments, ensure_ascii=False, default=str)
    if len(text) <= EVENT_ARGUMENT_CHARS:
        return arguments
    return {"_clipped": text[:EVENT_ARGUMENT_CHARS], "_chars": len(text)}


class Toolbox:
    """The tools of one turn. `remote` are the ready servers' tools the seat may use, `builtins`
    the engine's own; `fence()` says whether the seat is still this node's."""

    def __init__(self, remote: Sequence[RemoteTool], builtins: Sequence[Builtin], context: BuiltinContext,
                 *, fence: Callable[[], bool] = lambda: True) -> None:
        self.context = context
        self.fence = fence
        self._builtins = {b.spec.name: b for b in builtins}
        self._remote = {t.spec.name: t for t in remote if t.spec.name not in self._builtins}
        self._validators: dict[str, Any] = {}

    @property
    def specs(self) -> list[ToolSpec]:
        """What the model is offered this round: the built-ins, and the tools of every server
        still ready (one that crashed mid-turn is withdrawn from the next round)."""
        return [b.spec for b in self._builtins.values()] + \
            [t.spec for t in self._remote.values() if t.connection.state == READY]

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    async def run_all(self, calls: Sequence[ToolCall]) -> list[ToolRun]:
        """Every call of one round, in parallel; the runs in the order of the calls."""
        if len(calls) == 1:
            return [await self.run(calls[0])]
        return list(await asyncio.gather(*(self.run(call) for call in calls)))

    async def run(self, call: ToolCall) -> ToolRun:
        """One call, answered whatever happens (a bug in a built-in is an error result too)."""
        run = ToolRun(call=call, started_at=time.time())
        began = time.perf_counter()
        with tracing.span("tool.call", tool=call.name):
            try:
                await self._run(run)
            except Exception as exc:
                log.exception("tool_call_crashed", extra={"tool": call.name})
                self._error(run, f"the tool crashed: {type(exc).__name__}: {exc}")
        run.seconds = time.perf_counter() - began
        where = {"seat": self.context.seat.handle, "turn_id": self.context.turn_id, "tool": call.name}
        if run.is_error:
            log.warning("tool_call_failed", extra={**where, "error": run.error[:300]})
        if run.result_chars > MODEL_RESULT_CHARS:
            log.info("tool_result_cut", extra={**where, "result_chars": run.result_chars})
        return run

    async def _run(self, run: ToolRun) -> None:
        call = run.call
        if not self.fence():
            run.fenced = True
            self._error(run, "not run: this node no longer holds the seat's lease")
            return
        if call.problem:
            self._error(run, f"{call.problem}; send the arguments as a JSON object")
            return
        builtin, remote = self._builtins.get(call.name), self._remote.get(call.name)
        if builtin is None and remote is None:
            offered = ", ".join(self.names) or "none"
            self._error(run, f"unknown tool {call.name!r}; the tools you have are: {offered}")
            return
        spec = builtin.spec if builtin is not None else remote.spec
        mismatch = self._mismatch(spec, call.arguments)
        if mismatch:
            self._error(run, f"the arguments do not match {spec.name}'s schema: {mismatch}")
            return
        if builtin is not None:
            result = await builtin.run(self.context, call.arguments)
            run.ends_turn = result.ends_turn
            if result.is_error:
                self._error(run, result.text)
            else:
                self._result(run, result.text, False)
            return
        run.server, run.tool = remote.server, remote.tool
        outcome = await remote.connection.call(remote.tool, call.arguments)
        if outcome.error:
            self._error(run, outcome.error)
        else:
            self._result(run, outcome.text, outcome.is_error)

    def _mismatch(self, spec: ToolSpec, arguments: dict[str, Any]) -> str:
        """How `arguments` fail the tool's schema, field by field; "" when they match (or the
        schema itself cannot be read, when the server is left to judge)."""
        validator = self._validators.get(spec.name)
        if validator is None:
            validator = self._validators[spec.name] = _validator(json.dumps(spec.input_schema, sort_keys=True))
        if validator is False:
            return ""
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        parts = []
        for error in errors[:MAX_SCHEMA_ERRORS]:
            where = ".".join(str(p) for p in error.absolute_path) or "(the arguments)"
            parts.append(f"{where}: {error.message[:200]}")
        return "; ".join(parts)

    def _result(self, run: ToolRun, text: str, is_error: bool) -> None:
        run.full, run.result_chars, run.is_error = text, len(text), is_error
        run.content = text if len(text) <= MODEL_RESULT_CHARS else (
            text[:MODEL_RESULT_CHARS] + f"\n[cut: the result was {len(text):,} characters; "
                                        f"these are the first {MODEL_RESULT_CHARS:,}]")
        if is_error:
            run.error = text[:500]

    def _error(self, run: ToolRun, message: str) -> None:
        run.error, run.is_error = message, True
        run.content = run.full = f"Error: {message}"
        run.result_chars = len(run.full)
