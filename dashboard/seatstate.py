"""A seat's live state, folded from the events that move it (seed 000, "Event Types": the
placement pair drives the live projection; a turn's start and completion; seat_paused and
seat_resumed; a coding run holding or parking the inbox; llm_unavailable reads
`stopped`/`provider` until a model answers again; budget_exhausted and turn.guard_breach are
the seat's `last_error`; the seat's `stopped`/`budget` is read from the refusing window itself).

`SeatView.apply(event)` is the one reducer: the projection seeds a seat by replaying its
recent history through it and then feeds it the live stream, so both paths agree.

A running turn ends at its own end (its completion, its stop, its guard breach: the one
naming its turn_id, so a late end from a seat's previous holder leaves the new holder's turn
alone), and also where it can no longer be running: the seat released by the node running it,
the seat spawned on another node (a successor took it), or the node running it starting again
(`node_started`, from its org_started). The node that ran a turn it never ended records the end
itself at its next boot (seats.interrupted); these rules keep a screen honest meanwhile, and on
a node whose store never held that turn.

A seat's state is one of STATES, by precedence: paused, stopped, unplaced (no node holds
it), working, parked, held, idle. A human seat has no state: nothing runs it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from events.envelope import Event, format_timestamp

STATES = ("idle", "working", "held", "paused", "parked", "stopped", "unplaced")

TURN_STARTED = "agent_turn_started"
TURN_COMPLETED = "agent_turn_completed"
# Every type `SeatView.apply` reads; the projection replays a seat's last few of these.
MOVES: frozenset[str] = frozenset({
    "agent_spawned", "agent_terminated",
    TURN_STARTED, TURN_COMPLETED, "agent_turn_stopped", "agent_turn_progress", "agent_phase_completed",
    "seat_paused", "seat_resumed",
    "sandbox_run_started", "sandbox_clarification_requested", "sandbox_run_answered",
    "sandbox_run_completed", "sandbox_run_failed",
    "llm_unavailable", "budget_exhausted", "turn.guard_breach",
})
# What the store keeps of MOVES (the placement pair and the per-round signal are live-only).
STORED_MOVES: tuple[str, ...] = tuple(sorted(MOVES - {"agent_spawned", "agent_terminated", "agent_turn_progress"}))
PAUSE_TYPES: tuple[str, ...] = ("seat_paused", "seat_resumed")


def when(event: Event) -> str:
    return format_timestamp(event.timestamp)


def mark(event: Event, **more: Any) -> dict[str, Any]:
    """A pointer to the event that set a field: when, which event, which trace, and what it said."""
    return {"at": when(event), "event_id": str(event.id), "type": event.type, "trace_id": event.trace_id,
            "summary": event.summary(), **more}


def tokens_of(event: Event) -> int:
    return int(event.get("tokens_in") or 0) + int(event.get("tokens_out") or 0)


@dataclass
class SeatView:
    """One seat as the live screens show it. `holder` is the node that holds its lease."""

    handle: str
    kind: str = "agent"
    role: str = ""
    title: str = ""
    reports_to: str = ""
    holder: str | None = None
    working: dict[str, Any] | None = None      # {turn_id, since, resumed, node}
    paused: dict[str, Any] | None = None       # {by, reason, since, ...}
    held: dict[str, Any] | None = None         # a coding run holds the inbox
    parked: dict[str, Any] | None = None       # a run parked on a question, or a suspended turn
    provider_stop: dict[str, Any] | None = None
    budget_stop: dict[str, Any] | None = None  # set from the budget windows, not from events
    last_turn: dict[str, Any] | None = None
    last_error: dict[str, Any] | None = None
    turns_24h: int = 0
    tokens_24h: int = 0

    @property
    def is_agent(self) -> bool:
        return self.kind == "agent"

    @property
    def state(self) -> str | None:
        if not self.is_agent:
            return None
        if self.paused:
            return "paused"
        if self.provider_stop or self.budget_stop:
            return "stopped"
        if not self.holder:
            return "unplaced"
        if self.working:
            return "working"
        if self.parked:
            return "parked"
        if self.held:
            return "held"
        return "idle"

    @property
    def stopped(self) -> dict[str, Any] | None:
        """Why the seat reads `stopped`: {reason: provider|budget, ...}, else None."""
        if self.provider_stop:
            return {"reason": "provider", **self.provider_stop}
        if self.budget_stop:
            return {"reason": "budget", **self.budget_stop}
        return None

    def row(self) -> dict[str, Any]:
        """The seat as a frame carries it."""
        return {
            "handle": self.handle, "kind": self.kind, "role": self.role, "title": self.title,
            "reports_to": self.reports_to, "state": self.state, "holder": self.holder,
            "working": self.working, "paused": self.paused, "held": self.held, "parked": self.parked,
            "stopped": self.stopped, "last_turn": self.last_turn, "last_error": self.last_error,
            "turns_24h": self.turns_24h, "tokens_24h": self.tokens_24h,
        }

    # -- the reducer --------------------------------------------------------------------
    def apply(self, event: Event) -> bool:
        """Fold one event into the seat; True when anything a screen shows changed."""
        handler = _HANDLERS.get(event.type)
        if handler is None or not self.is_agent:
            return False
        before = self.row()
        handler(self, event)
        return self.row() != before

    def node_started(self, node: str) -> bool:
        """`node` (re)started (its org_started): a turn it was running is over. True when the seat changed."""
        if self.working is not None and node and self.working.get("node") == node:
            self.working = None
            return True
        return False


def _spawned(seat: SeatView, event: Event) -> None:
    seat.holder = event.node or seat.holder
    if seat.working is not None and event.node and seat.working.get("node") not in ("", event.node):
        seat.working = None  # a successor took the seat: the previous holder's turn is not running


def _terminated(seat: SeatView, event: Event) -> None:
    # A release by a node that no longer holds the seat (it moved on first) changes nothing.
    if not seat.holder or seat.holder == event.node:
        seat.holder = None
        seat.working = None  # a released instance's call comes off the screen


def _turn_started(seat: SeatView, event: Event) -> None:
    seat.working = {"turn_id": event.get("turn_id") or "", "since": when(event), "resumed": bool(event.get("resumed")),
                    "node": event.node}
    seat.parked = None


def _progress(seat: SeatView, event: Event) -> None:
    if seat.working is None:  # a turn already running when this screen's projection began
        seat.working = {"turn_id": event.get("turn_id") or "", "since": when(event), "resumed": False,
                        "node": event.node}


def _ends_running(seat: SeatView, event: Event) -> None:
    """The event ends the running turn when it names that turn (or either names none)."""
    if seat.working is None:
        return
    running, ended = seat.working.get("turn_id") or "", event.get("turn_id") or ""
    if not running or not ended or running == ended:
        seat.working = None


def _turn_completed(seat: SeatView, event: Event) -> None:
    _ends_running(seat, event)
    failed = bool(event.get("failed"))
    seat.last_turn = mark(event, turn_id=event.get("turn_id") or "", tokens=tokens_of(event), failed=failed,
                          stopped=bool(event.get("stopped")), suspended=bool(event.get("suspended")),
                          duration_ms=int(event.get("duration_ms") or 0))
    if event.get("suspended"):
        seat.parked = mark(event, on="coding run")
    if failed:
        seat.last_error = mark(event)
    else:
        seat.provider_stop = None  # a model answered: the provider works again


def _turn_stopped(seat: SeatView, event: Event) -> None:
    _ends_running(seat, event)


def _phase_completed(seat: SeatView, event: Event) -> None:
    if not (event.get("failed") or event.get("error_kind")):
        seat.provider_stop = None


def _paused(seat: SeatView, event: Event) -> None:
    seat.paused = mark(event, by=event.get("paused_by_seat") or event.get("paused_by") or "",
                       reason=event.get("reason") or "", stop_running=bool(event.get("stop_running")))


def _resumed(seat: SeatView, event: Event) -> None:
    seat.paused = None


def _run_started(seat: SeatView, event: Event) -> None:
    seat.held = mark(event, run_id=event.get("run_id") or "")
    seat.parked = None


def _run_parked(seat: SeatView, event: Event) -> None:
    seat.held = None  # the inbox is released so the answer can reach the seat
    seat.parked = mark(event, run_id=event.get("run_id") or "")


def _run_answered(seat: SeatView, event: Event) -> None:
    if (event.get("outcome") or "") in ("resumed", "gone"):
        seat.parked = None


def _run_settled(seat: SeatView, event: Event) -> None:
    seat.held = None
    seat.parked = None


def _llm_unavailable(seat: SeatView, event: Event) -> None:
    seat.provider_stop = mark(event, providers=list(event.get("providers") or []))
    seat.last_error = mark(event)


def _budget_exhausted(seat: SeatView, event: Event) -> None:
    seat.working = None  # a refused charge ended the turn
    seat.last_error = mark(event, scope=event.get("scope") or "", period=event.get("period") or "")


def _guard_breach(seat: SeatView, event: Event) -> None:
    if seat.working and seat.working.get("turn_id") in ("", event.get("turn_id")):
        seat.working = None  # the turn died in its own frames: no completion follows
    seat.last_error = mark(event, guard=event.get("guard") or "")


_HANDLERS = {
    "agent_spawned": _spawned,
    "agent_terminated": _terminated,
    TURN_STARTED: _turn_started,
    TURN_COMPLETED: _turn_completed,
    "agent_turn_stopped": _turn_stopped,
    "agent_turn_progress": _progress,
    "agent_phase_completed": _phase_completed,
    "seat_paused": _paused,
    "seat_resumed": _resumed,
    "sandbox_run_started": _run_started,
    "sandbox_clarification_requested": _run_parked,
    "sandbox_run_answered": _run_answered,
    "sandbox_run_completed": _run_settled,
    "sandbox_run_failed": _run_settled,
    "llm_unavailable": _llm_unavailable,
    "budget_exhausted": _budget_exhausted,
    "turn.guard_breach": _guard_breach,
}


def budget_stops(windows: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """From a budget_meters snapshot: the company window refusing (if any) and each seat's.

    Only a window whose engine-computed state is `refusing` stops anybody (seed 000,
    "budget_exhausted": the seat's stopped/budget is read from the refusing window itself).
    """
    company: dict[str, Any] | None = None
    seats: dict[str, dict[str, Any]] = {}
    for window in windows or ():
        if not isinstance(window, dict) or window.get("state") != "refusing":
            continue
        brief = {k: window.get(k) for k in ("scope", "period", "window", "spend", "ceiling", "resets_at")}
        if window.get("scope") == "company":
            company = company or brief
        elif window.get("agent_handle"):
            seats.setdefault(str(window["agent_handle"]), brief)
    return company, seats


def windows_of_snapshot(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """GET /budgets' answer ({"company": {period: window}, "seats": {handle: {period: window}}})
    as the flat window list a budget_meters snapshot carries."""
    windows: list[dict[str, Any]] = []
    for period, window in ((snapshot or {}).get("company") or {}).items():
        windows.append({**window, "scope": "company", "period": period})
    for handle, periods in ((snapshot or {}).get("seats") or {}).items():
        for period, window in (periods or {}).items():
            windows.append({**window, "scope": "seat", "agent_handle": handle, "period": period})
    return windows
