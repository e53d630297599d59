"""Field groups several event types share, and the words their summaries use.

A seat's events carry `agent_id`, `agent_handle` and `agent_role` (the event store promotes
the first two to columns); a turn's events add `turn_id` and `conversation_key`, the
conversation identity a turn's events are tagged with (seed 000, "Inbox Batching"). Nothing
here is registered: these are bases, not types.
"""
from __future__ import annotations

from events.envelope import EventData


class SeatEvent(EventData):
    """An event about one seat."""

    agent_id: str = ""
    agent_handle: str = ""
    agent_role: str = ""

    @property
    def seat(self) -> str:
        """The seat as a person would name it: its handle, else its id."""
        return self.agent_handle or self.agent_id or "a seat"


class TurnEvent(SeatEvent):
    """An event a turn publishes, tagged with the turn and its conversation identity."""

    turn_id: str = ""
    conversation_key: str = ""


def person(*names: str, default: str = "someone") -> str:
    """The first non-empty name: a person's seat before the credential they used."""
    for name in names:
        if name:
            return name
    return default


def possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def duration(ms: int | float | None) -> str:
    """4.2 s, 3.5 min, 1.2 h: one decimal, in the unit a reader would say."""
    seconds = (ms or 0) / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def count(n: int | None, noun: str, plural: str | None = None) -> str:
    """1,234 tokens; 1 message."""
    n = n or 0
    word = noun if n == 1 else (plural or f"{noun}s")
    return f"{n:,} {word}"


def size(n: int | None) -> str:
    """Bytes as a person reads them: 812 B, 12.3 KB, 4.0 MB."""
    n = n or 0
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def clip(text: str | None, limit: int = 120) -> str:
    """One line of at most `limit` characters, with an ellipsis when cut."""
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def because(reason: str | None) -> str:
    """': <reason>' when there is one, so a summary reads the same with or without it."""
    return f": {clip(reason)}" if reason else ""
