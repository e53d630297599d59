"""One node's part of a fleet history question (seed 000, "Reading the fleet's history").

"The question travels, not the data": the node serving a read asks every live node the same
question, and each answers it from its own store. This module is both ends' shared language:

- `Question`: the question's name, its arguments and the asker's instant, in one protocol
  version. A node answers only a question in its own version and refuses any other by
  version ("every node speaks one protocol version, and only that one"); a question without
  an instant is refused rather than answered as of the node's own clock.
- `read_part`: the answer, read from this node's store floored at the asker's instant less
  the history's horizon (events.retention).
- `answer_bytes`: the whole exchange for a responder -- decode, check, read, cut to the reply
  budget, encode -- which never raises: a failure is an answer naming it.

A reply too large for the transport is cut from the least important end and says so ("a
node gives up rows from the least important end -- a long turn's middle before its ending --
and says it holds more, which the merge already handles"): a page gives up its oldest rows
and says `more`; a trace its middle and says how many in `cut`; the projection's seed its
oldest feed and seat rows. One event too large to carry is refused by name.

The questions: `events_page`, `event`, `trace` (the REST routes' and the dashboard's),
`seed` (the live projection's start), `kept` (which named rows of an unsettled custody
batch a node keeps: events.custody) and `find` (the trace the dashboard's trace box names:
a node that predates it refuses it as unknown, and the asker names that node in the coverage).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

import pydantic_core
from django.db import DEFAULT_DB_ALIAS

from events import custody, queries
from events.envelope import format_timestamp, parse_timestamp
from events.errors import EventError
from events.retention import floor_at

PROTOCOL_VERSION = 1
QUESTIONS = ("events_page", "event", "trace", "seed", "kept", "find")
MiB = 1024 * 1024
# 7 MiB: under the 8 MiB every server carries for the engine (seed 002, "The largest message
# every server must carry"), with room for the envelope around the rows.
REPLY_BUDGET_BYTES = 7 * MiB


class QuestionRefused(EventError):
    """A question this node does not answer; `kind` is what the coverage names (version,
    instant, unreadable, unknown)."""

    def __init__(self, kind: str, reason: str) -> None:
        self.kind = kind
        super().__init__(f"{kind}: {reason}")

    @property
    def detail(self) -> str:
        return str(self).removeprefix("events: ")


@dataclass(frozen=True)
class Question:
    """One fleet history question, asked at one instant."""

    name: str
    at: datetime
    args: dict[str, Any] = field(default_factory=dict)
    version: int = PROTOCOL_VERSION

    def encode(self) -> bytes:
        return json.dumps({"v": self.version, "q": self.name, "at": format_timestamp(self.at), "args": self.args}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> "Question":
        """The question in `raw`; QuestionRefused naming why it is not answered."""
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise QuestionRefused("unreadable", "the question is not JSON") from None
        if not isinstance(body, dict):
            raise QuestionRefused("unreadable", "the question is not an object")
        version = body.get("v")
        if version != PROTOCOL_VERSION:
            raise QuestionRefused("version", f"this node speaks history protocol {PROTOCOL_VERSION}; "
                                             f"the question was asked in {version!r}")
        name = body.get("q")
        if name not in QUESTIONS:
            raise QuestionRefused("unknown", f"{name!r} is not a history question (one of {', '.join(QUESTIONS)})")
        if not body.get("at"):
            raise QuestionRefused("instant", "a question carries the asker's instant; this one carries none")
        try:
            at = parse_timestamp(body["at"])
        except Exception:
            raise QuestionRefused("instant", f"{body['at']!r} is not an instant") from None
        args = body.get("args") or {}
        if not isinstance(args, dict):
            raise QuestionRefused("unreadable", "the question's args are not an object")
        return cls(name=name, at=at, args=args, version=version)


# -- reading -----------------------------------------------------------------------------------
def read_part(question: Question, *, horizon_hours: float, using: str = DEFAULT_DB_ALIAS) -> dict[str, Any]:
    """This node's answer to `question`, from its own store, floored at the asker's instant.
    EventQueryError for an argument the store cannot answer."""
    floor = floor_at(question.at, horizon_hours)
    reader = _READERS[question.name]
    return reader(question.args, floor, using)


def _page(args: dict[str, Any], floor: datetime, using: str) -> dict[str, Any]:
    page = queries.events_page(**_page_args(args), floor=floor, using=using)
    return {"items": page["items"], "more": page["next_cursor"] is not None}


PAGE_ARGS = ("category", "types", "agent", "trace_id", "since", "until", "feed_only", "cursor", "limit")


def _page_args(args: dict[str, Any]) -> dict[str, Any]:
    return {k: args[k] for k in PAGE_ARGS if k in args}


def _event(args: dict[str, Any], floor: datetime, using: str) -> dict[str, Any]:
    return {"item": queries.get_event(args.get("event_id"), floor=floor, using=using)}


def _trace(args: dict[str, Any], floor: datetime, using: str) -> dict[str, Any]:
    return {"items": queries.trace(args.get("trace_id"), floor=floor, using=using), "cut": 0}


def _seed(args: dict[str, Any], floor: datetime, using: str) -> dict[str, Any]:
    """What the live projection folds in when it starts: the feed, each seat's recent state
    events and its last pause, the completed turns per minute (kept rows counted, rows of an
    unsettled custody batch named)."""
    until = args["until"]
    since = queries.parse_time(args["turns_since"], "turns_since")
    seats = {}
    for handle in args.get("handles") or []:
        recent = queries.events_page(types=args["move_types"], agent=handle, until=until, limit=args["seat_replay"],
                                     floor=floor, using=using)["items"]
        pause = queries.events_page(types=args["pause_types"], agent=handle, until=until, limit=1, floor=floor,
                                    using=using)["items"]
        seats[handle] = {"recent": recent, "pause": pause}
    end = queries.parse_time(until, "until")
    return {
        "feed": queries.events_page(feed_only=True, until=until, limit=args["feed_size"], floor=floor, using=using)["items"],
        "seats": seats,
        "turns": queries.turns_by_minute(max(since, floor), end, kept_only=True, using=using),
        "unsettled": custody.unsettled_turns(max(since, floor), end, using=using),
        "cut": 0,
    }


def _kept(args: dict[str, Any], floor: datetime, using: str) -> dict[str, Any]:
    return {"ids": custody.kept_ids([str(i) for i in args.get("ids") or []], using=using)}


def _find(args: dict[str, Any], floor: datetime, using: str) -> dict[str, Any]:
    """What this store says the trace box's text names (events.queries.find_trace). Not floored:
    it names a trace; the trace page that opens reads it floored."""
    match = queries.find_trace(args.get("q"), using=using)
    return {"trace_id": match.trace_id, "via": match.via, "candidates": list(match.candidates),
            "assigned": match.assigned}


_READERS: dict[str, Callable[[dict[str, Any], datetime, str], dict[str, Any]]] = {
    "events_page": _page, "event": _event, "trace": _trace, "seed": _seed, "kept": _kept, "find": _find,
}


# -- answering ----------------------------------------------------------------------------------
def answer_bytes(raw: bytes, *, node_id: str, horizon_hours: float, budget: int = REPLY_BUDGET_BYTES,
                 using: str = DEFAULT_DB_ALIAS) -> bytes:
    """A responder's whole exchange: the encoded answer to the question in `raw`, never an
    exception -- a refusal or a failed read is an answer that names it."""
    try:
        question = Question.decode(raw)
        part = read_part(question, horizon_hours=horizon_hours, using=using)
        return encode_answer(node_id, cut_to_budget(question.name, part, budget))
    except QuestionRefused as exc:
        return _refusal(node_id, exc.detail)
    except queries.EventQueryError as exc:
        return _refusal(node_id, f"refused: {exc.detail}")
    except TooLarge as exc:
        return _refusal(node_id, str(exc))
    except Exception as exc:  # its own read failing: named in the coverage, never a silence
        return _refusal(node_id, f"read_failed: {type(exc).__name__}: {exc}")


def encode_answer(node_id: str, part: dict[str, Any]) -> bytes:
    return _dumps({"v": PROTOCOL_VERSION, "node": node_id, "part": part})


def _refusal(node_id: str, error: str) -> bytes:
    return _dumps({"v": PROTOCOL_VERSION, "node": node_id, "error": error})


def _dumps(value: Any) -> bytes:
    return pydantic_core.to_json(value, inf_nan_mode="null", fallback=str)


# -- cutting to the budget ------------------------------------------------------------------------
class TooLarge(Exception):
    """A part that cannot be cut to the budget (one event larger than it)."""


ENVELOPE_BYTES = 1024  # the answer's own keys and the node id around the rows


def _size(item: Any) -> int:
    return len(_dumps(item)) + 1


def cut_to_budget(name: str, part: dict[str, Any], budget: int) -> dict[str, Any]:
    """`part` within `budget` bytes once encoded, cut from its least important end; the same
    part when it fits."""
    if len(_dumps(part)) + ENVELOPE_BYTES <= budget:
        return part
    room = budget - ENVELOPE_BYTES
    if name == "events_page":
        items = _keep_head(part["items"], room)
        if not items:
            raise TooLarge(f"too_large: the newest row alone is over the {budget}-byte reply budget")
        return {"items": items, "more": True}
    if name == "trace":
        items, cut = _keep_ends(part["items"], room)
        return {"items": items, "cut": part.get("cut", 0) + cut}
    if name == "seed":
        return _cut_seed(part, room)
    raise TooLarge(f"too_large: the {name} answer is over the {budget}-byte reply budget")


def _keep_head(items: list[Any], room: int) -> list[Any]:
    """The newest rows that fit (a page is newest first: its oldest end goes)."""
    kept, used = [], 0
    for item in items:
        used += _size(item)
        if used > room:
            break
        kept.append(item)
    return kept


def _keep_ends(items: list[Any], room: int) -> tuple[list[Any], int]:
    """A trace's first and last rows, as many as fit, taken alternately from each end: its
    middle goes first, so what began it and how it ended survive. The kept rows, and how many went."""
    sizes = [_size(i) for i in items]
    head, tail, used = 0, len(items), 0
    take_head = True
    while head < tail:
        index = head if take_head else tail - 1
        if used + sizes[index] > room:
            break
        used += sizes[index]
        if take_head:
            head += 1
        else:
            tail -= 1
        take_head = not take_head
    kept = items[:head] + items[tail:]
    return kept, len(items) - len(kept)


def _cut_seed(part: dict[str, Any], room: int) -> dict[str, Any]:
    """The seed without its oldest feed rows, then its seats' oldest rows, until it fits."""
    feed = list(part["feed"])
    seats = {h: {"recent": list(s["recent"]), "pause": s["pause"]} for h, s in part["seats"].items()}
    used = _size({**part, "feed": [], "seats": {h: {"recent": [], "pause": s["pause"]} for h, s in seats.items()}})
    used += sum(_size(i) for i in feed) + sum(_size(i) for s in seats.values() for i in s["recent"])
    cut = part.get("cut", 0)
    for rows in (feed, *(s["recent"] for s in seats.values())):
        while rows and used > room:
            used -= _size(rows.pop())
            cut += 1
    if used > room:
        raise TooLarge("too_large: the seed's counts alone are over the reply budget")
    return {**part, "feed": feed, "seats": seats, "cut": cut}
