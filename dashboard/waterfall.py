"""A trace as a waterfall (seed 002, "Dashboard Trace View": the root event as the header, child
events nested beneath, `inspect →` on LLM turn events, skip reasons inline; seed 000,
"Distributed Tracing": a delivery is the root of the trace everything it causes hangs under).

The spans alone do not draw the tree an operator reads: the webhook edge records the delivery,
the wake it routes and every skip under one span, and a turn's span hangs under that span, not
under the wake that triggered it. So the tree is built from what each event says it is about:

    webhook (inbound_delivery)                 a root
      notification (external_notification,     under the delivery of its span
                    notification_skipped, ...)
        turn (agent_turn_* of one turn_id)     under the event its trigger_id names
          phase (agent_phase_completed)        under its turn
            round (the phase's rounds[])       under its phase
              tool call (a round's tool_calls) under its round
    task (task_assigned, scheduled_task_fired) a root, or under what its span says

Anything else hangs under the row owning its parent span (or its own span), else at the root.

Times: every row has `start_ms` from the trace's first instant and `duration_ms` (None for an
instant). A turn runs from agent_turn_started to agent_turn_completed; a phase starts at its
agent_phase_started when the trace holds it (else its event less its `duration_ms`: the turn
records the two a moment apart, so a rounded duration would place it after its prompt.size)
and lasted its `duration_ms`; a round starts at its `started_at` (else where the previous one
ended); a tool call starts at its own `started_at` when it carries one, else the round's tool
calls are laid end to end after the model's answer, finishing as the round does.

The rounds and tool calls follow the shape agent_phase_completed carries, `rounds: [{round,
stop_reason, text, tool_calls: [{name, arguments, result, duration_ms, error}], duration_ms}]`;
a round or call that carries `started_at` is placed by it. A turn with no completion yet is
`running` to the last event seen (the page extends it to now, and agent_turn_progress frames
redraw it).

Status: `ok`, `failed` (red: a failed, unavailable or budget-refused turn, a failed phase, an
errored tool call, a guard breach), `stopped`, `skipped` (a dropped notification or a trigger
already worked, with its reason inline) and `running`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from events.queries import trace as trace_events

NOTIFICATION_TYPES = frozenset({"external_notification", "notification_skipped", "notifications_coalesced"})
TASK_TYPES = frozenset({"task_assigned", "scheduled_task_fired"})
TURN_TYPES = frozenset({"agent_turn_started", "agent_turn_completed", "agent_phase_started", "agent_phase_completed"})
SKIP_TYPES = frozenset({"notification_skipped", "turn_trigger_skipped"})
BREACH_TYPES = frozenset({"turn.guard_breach"})
FAILED_OUTCOMES = frozenset({"failed", "llm_unavailable", "budget_exhausted"})
# A word for what each kind of event row is, where "event" would say nothing.
BADGES = {"budget_exhausted": "budget", "provider_fallback": "fallback", "llm_unavailable": "provider",
          "agent_turn_stopped": "stopped", "turn.guard_breach": "breach", "turn_trigger_skipped": "skip",
          "notification_skipped": "skip", "notifications_coalesced": "digest", "external_notification": "notification",
          "inbound_delivery": "webhook", "task_assigned": "task", "scheduled_task_fired": "schedule"}
TEXT_LIMIT = 4000  # characters of a prompt, reply or tool result carried in a row's detail


@dataclass
class Row:
    """One line of the waterfall; `children` nest beneath it."""

    key: str
    kind: str                      # webhook, notification, task, turn, phase, round, tool, event
    label: str
    at: datetime
    duration_ms: float | None = None
    status: str = "ok"
    note: str = ""                 # a skip's reason, a failure's error, a breach's guard
    event_id: str = ""
    inspect_id: str = ""
    seat: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    children: list["Row"] = field(default_factory=list)
    badge: str = ""                # what an `event` row is, in a word (budget, fallback, breach, ...)

    def end(self) -> datetime:
        return self.at + timedelta(milliseconds=self.duration_ms or 0)

    def to_dict(self, origin: datetime) -> dict[str, Any]:
        return {
            "key": self.key, "kind": self.kind, "label": self.label, "status": self.status, "note": self.note,
            "at": self.at.isoformat(), "start_ms": _ms(self.at - origin),
            "duration_ms": round(self.duration_ms, 3) if self.duration_ms is not None else None,
            "event_id": self.event_id, "inspect_id": self.inspect_id, "seat": self.seat, "detail": self.detail,
            "badge": self.badge or self.kind,
            "children": [c.to_dict(origin) for c in sorted(self.children, key=lambda c: (c.at, c.key))],
        }


def waterfall(trace_id: str) -> dict[str, Any]:
    """The waterfall of one trace, read from this node's store (`events.queries.trace`)."""
    return build(trace_id, trace_events(trace_id))


def build(trace_id: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """`{trace_id, started_at, duration_ms, events, rows, failed, turns, failed_turns}` for a
    trace's stored items (oldest first, as `events.queries.trace` lists them); `failed` counts
    every red row."""
    if not items:
        return {"trace_id": trace_id, "started_at": None, "duration_ms": 0, "events": 0, "rows": [], "failed": 0,
                "failed_turns": 0, "turns": 0}
    tree = _Tree()
    for item in items:
        tree.add(item)
    roots = tree.roots()
    everything = list(_walk(roots))
    origin = min(r.at for r in everything)
    finish = max(r.end() for r in everything)
    return {"trace_id": trace_id, "started_at": origin.isoformat(), "duration_ms": _ms(finish - origin),
            "events": len(items), "rows": [r.to_dict(origin) for r in sorted(roots, key=lambda r: (r.at, r.key))],
            "failed": sum(1 for r in everything if r.status == "failed"),
            "failed_turns": sum(1 for r in everything if r.kind == "turn" and r.status == "failed"),
            "turns": sum(1 for r in everything if r.kind == "turn")}


class _Tree:
    """The rows of one trace as they are folded in, and what each is known by."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.by_event: dict[str, Row] = {}
        self.by_span: dict[str, Row] = {}              # a span's first row (oldest first)
        self.turns: dict[str, Row] = {}
        self.links: dict[str, tuple[list[str], list[str]]] = {}  # row key -> (trigger ids, spans to look under)
        self.phase_starts: dict[tuple[str, str, Any], datetime] = {}  # (turn, phase, iteration) -> its agent_phase_started

    # -- folding events in ----------------------------------------------------------------
    def add(self, item: dict[str, Any]) -> None:
        kind = item.get("type", "")
        if kind in TURN_TYPES or (item.get("turn_id") and kind not in SKIP_TYPES):
            self._turn_event(item)
            return
        row = Row(key=f"event:{item['id']}", kind=_kind(kind), label=_label(item), at=_time(item),
                  event_id=item["id"], seat=item.get("agent_handle") or "", badge=BADGES.get(kind, ""))
        if kind in SKIP_TYPES:
            row.status, row.note, row.label = "skipped", _skip_note(item), _skip_label(item)
        if kind in TASK_TYPES:
            row.detail = {"task": _clip(item.get("task"))}
        triggers = [str(item["trigger_id"])] if kind == "turn_trigger_skipped" and item.get("trigger_id") else []
        self._keep(row, item, triggers)

    def _keep(self, row: Row, item: dict[str, Any], triggers: list[str]) -> None:
        self.rows.append(row)
        self.by_event[item["id"]] = row
        span = item.get("span_id") or ""
        if span:
            self.by_span.setdefault(span, row)
        self.links[row.key] = (triggers, [s for s in (item.get("parent_span_id"), span) if s])

    def _turn_event(self, item: dict[str, Any]) -> None:
        turn_id = item.get("turn_id") or f"event:{item['id']}"
        turn = self.turns.get(turn_id)
        kind = item.get("type")
        triggers = [str(t) for t in [item.get("trigger_id"), *(item.get("trigger_ids") or [])] if t]
        if turn is None:
            turn = Row(key=f"turn:{turn_id}", kind="turn", label=f"{item.get('agent_handle') or 'a seat'}'s turn",
                       at=_time(item), status="running", seat=item.get("agent_handle") or "")
            self.turns[turn_id] = turn
            self._keep(turn, item, triggers)
        else:
            self.by_event[item["id"]] = turn
            if triggers and not self.links[turn.key][0]:
                self.links[turn.key] = (triggers, self.links[turn.key][1])
        if kind == "agent_turn_started":
            turn.at = min(turn.at, _time(item))
            turn.event_id = turn.event_id or item["id"]
            turn.inspect_id = turn.inspect_id or item["id"]
        elif kind == "agent_turn_completed":
            self._complete(turn, item)
        elif kind == "agent_phase_started":
            self.phase_starts.setdefault((turn_id, str(item.get("phase") or ""), item.get("iteration")), _time(item))
        elif kind == "agent_phase_completed":
            turn.children.append(_phase(item, self.phase_starts.get((turn_id, str(item.get("phase") or ""), item.get("iteration")))))
        elif kind in BREACH_TYPES:
            turn.status, turn.note = "failed", f"guard breach: {item.get('guard') or ''} {item.get('detail') or ''}".strip()
            turn.children.append(Row(key=f"event:{item['id']}", kind="event", label=_label(item), at=_time(item),
                                     status="failed", event_id=item["id"], badge=BADGES.get(kind, "")))
        else:
            failed = kind in ("llm_unavailable", "budget_exhausted")
            turn.children.append(Row(key=f"event:{item['id']}", kind="event", label=_label(item), at=_time(item),
                                     status="failed" if failed else "ok", event_id=item["id"], badge=BADGES.get(kind, "")))
        if turn.status in ("running", "failed") and _time(item) > turn.end():
            turn.duration_ms = _ms(_time(item) - turn.at)

    def _complete(self, turn: Row, item: dict[str, Any]) -> None:
        outcome = item.get("outcome") or ("failed" if item.get("failed") else "completed")
        ended = _time(item)
        duration = item.get("duration_ms")
        if isinstance(duration, (int, float)) and duration > 0:
            turn.at = min(turn.at, ended - timedelta(milliseconds=duration))
        turn.duration_ms = _ms(ended - turn.at)
        turn.event_id, turn.inspect_id = item["id"], item["id"]
        if turn.status != "failed":  # a breach already said why
            turn.status = "failed" if outcome in FAILED_OUTCOMES or item.get("failed") else (
                "stopped" if outcome == "stopped" else "ok")
            turn.note = item.get("error") or (outcome if outcome != "completed" else "")
        tokens = (item.get("tokens_in") or 0) + (item.get("tokens_out") or 0)
        turn.label = f"{item.get('agent_handle') or 'a seat'}'s turn" + (f" · {tokens:,} tokens" if tokens else "")
        turn.detail = {**turn.detail, "outcome": outcome, "reply": _clip(item.get("response")),
                       "tokens_in": item.get("tokens_in") or 0, "tokens_out": item.get("tokens_out") or 0,
                       "trigger_type": item.get("trigger_type") or ""}

    # -- nesting --------------------------------------------------------------------------
    def roots(self) -> list[Row]:
        """Nest every row under its parent (the event its trigger names, else the row owning the
        span it hangs under, else its own span's first row); what nests nowhere is a root."""
        for turn in self.turns.values():
            phases = [c for c in turn.children if c.kind == "phase"]
            if phases and "prompt" not in turn.detail:
                turn.detail["prompt"] = phases[0].detail.get("user_prompt", "")
        parents: dict[str, Row] = {}
        for row in self.rows:
            parent = self._parent_of(row)
            if parent is not None and not _reaches(parents, parent, row):
                parents[row.key] = parent
                parent.children.append(row)
        return [r for r in self.rows if r.key not in parents]

    def _parent_of(self, row: Row) -> Row | None:
        triggers, spans = self.links[row.key]
        for trigger in triggers:
            found = self.by_event.get(trigger)
            if found is not None and found is not row:
                return found
        for span in spans:
            found = self.by_span.get(span)
            if found is not None and found is not row:
                return found
        return None


def _reaches(parents: dict[str, Row], start: Row, target: Row) -> bool:
    """Whether `start` already nests (at any depth) under `target`: a loop is drawn once."""
    seen: set[str] = set()
    row: Row | None = start
    while row is not None and row.key not in seen:
        if row is target:
            return True
        seen.add(row.key)
        row = parents.get(row.key)
    return False


def _phase(item: dict[str, Any], started: datetime | None = None) -> Row:
    ended = _time(item)
    duration = float(item.get("duration_ms") or 0)
    start = started if started is not None and started <= ended else ended - timedelta(milliseconds=duration)
    failed = bool(item.get("failed"))
    phase = Row(key=f"event:{item['id']}", kind="phase", label=f"phase {item.get('phase') or '?'}"
                + (f" on {item.get('model')}" if item.get("model") else ""), at=start, duration_ms=duration,
                status="failed" if failed else "ok", note=(item.get("error") or item.get("error_kind") or "") if failed else "",
                event_id=item["id"], inspect_id=item["id"], seat=item.get("agent_handle") or "",
                detail={"system_prompt": _clip(item.get("system_prompt")), "user_prompt": _clip(item.get("user_prompt")),
                        "response": _clip(item.get("response")), "tokens_in": item.get("tokens_in") or 0,
                        "tokens_out": item.get("tokens_out") or 0})
    cursor = start
    for i, entry in enumerate(item.get("rounds") or []):
        if not isinstance(entry, dict):
            continue
        round_row = _round(item["id"], i, entry, cursor)
        phase.children.append(round_row)
        cursor = round_row.end()
    return phase


def _round(phase_id: str, index: int, entry: dict[str, Any], cursor: datetime) -> Row:
    start = _parse(entry.get("started_at")) or cursor
    duration = float(entry.get("duration_ms") or 0)
    number = entry.get("round") or index + 1
    calls = [c for c in entry.get("tool_calls") or [] if isinstance(c, dict)]
    row = Row(key=f"round:{phase_id}:{index}", kind="round", label=f"round {number}"
              + (f" · {entry['stop_reason']}" if entry.get("stop_reason") else "")
              + (f" · {len(calls)} tool call{'s' if len(calls) != 1 else ''}" if calls else ""),
              at=start, duration_ms=duration, status="failed" if entry.get("error") else "ok",
              note=str(entry.get("error") or ""),
              detail={k: v for k, v in (("text", _clip(entry.get("text"))), ("model", entry.get("model")),
                                        ("provider", entry.get("provider_key")), ("tokens_in", entry.get("tokens_in")),
                                        ("tokens_out", entry.get("tokens_out"))) if v not in (None, "")})
    # Tool calls without their own start run after the model's answer, end to end, finishing
    # as the round does (the round's time is the model's plus its tools').
    spent = sum(float(c.get("duration_ms") or 0) for c in calls)
    at = start + timedelta(milliseconds=max(duration - spent, 0))
    for j, call in enumerate(calls):
        took = float(call.get("duration_ms") or 0)
        began = _parse(call.get("started_at")) or at
        error = call.get("error")
        row.children.append(Row(
            key=f"tool:{phase_id}:{index}:{j}", kind="tool", label=f"tool {call.get('name') or '?'}", at=began,
            duration_ms=took, status="failed" if error else "ok", note=str(error or ""),
            detail={"arguments": call.get("arguments"), "result": _clip(call.get("result")), "error": error}))
        at = began + timedelta(milliseconds=took)
        if error:
            row.status = "failed"
    return row


def _walk(rows: list[Row]):
    for row in rows:
        yield row
        yield from _walk(row.children)


def _kind(event_type: str) -> str:
    if event_type == "inbound_delivery":
        return "webhook"
    if event_type in NOTIFICATION_TYPES:
        return "notification"
    if event_type in TASK_TYPES:
        return "task"
    return "event"


def _label(item: dict[str, Any]) -> str:
    return str(item.get("summary") or item.get("label") or item.get("type") or "an event")


def _skip_label(item: dict[str, Any]) -> str:
    """A skip's row says whose it was; its reason is the row's note, beside it."""
    if item.get("type") == "turn_trigger_skipped":
        return f"{item.get('agent_handle') or 'a seat'} skipped a trigger"
    whom = item.get("agent_handle") or item.get("recipient") or "a recipient"
    what = str(item.get("event_kind") or "a delivery").replace("_", " ")
    return f"{what} not delivered to {whom}"


def _skip_note(item: dict[str, Any]) -> str:
    reason, detail = item.get("reason") or "no reason given", item.get("detail") or ""
    return f"{reason} ({detail})" if detail else str(reason)


def _clip(text: Any) -> str:
    value = "" if text is None else str(text)
    return value if len(value) <= TEXT_LIMIT else value[:TEXT_LIMIT] + f"… ({len(value) - TEXT_LIMIT:,} more characters: inspect)"


def _parse(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _time(item: dict[str, Any]) -> datetime:
    return _parse(item.get("timestamp")) or datetime.fromisoformat("1970-01-01T00:00:00+00:00")


def _ms(delta: timedelta) -> float:
    return round(delta.total_seconds() * 1000, 3)
