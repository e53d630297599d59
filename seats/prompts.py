"""What a turn's model is told (seed 000, "Event Types": `prompt.size`, "one phase's OPENING
prompt, measured in BYTES plus a token approximation: the system and user text, a resumed
phase's seeded conversation ... and the tool-definition array both providers bill as input").

`system_text` says who the seat is; `user_text` is the trigger (with the messages of its
conversation still waiting for an answer, when memory holds any); `prompt_size` measures the
opening prompt for its `prompt.size` row.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any, Sequence

from engine.config.company import Company, Seat
from events.envelope import Event
from seats.providers.base import Message, ToolSpec, message_text


def system_text(company: Company, seat: Seat) -> str:
    """The system prompt: who the seat is, in which company, reporting to whom."""
    lines = [f"You are {seat.handle}" + (f", {seat.title}" if seat.title else "") + f", at {company.name}."]
    if seat.role:
        lines.append(f"Your role: {seat.role}.")
    if seat.reports_to:
        lines.append(f"You report to {seat.reports_to}.")
    lines.append("Work the message below and reply with what you did or will do.")
    return "\n".join(lines)


def user_text(trigger: Event) -> str:
    """The user prompt: the trigger's summary, then its sender, subject, task and body (for a
    merged trigger, the digest body) where it carries them."""
    lines = [trigger.summary()]
    for label, name in (("From", "sender"), ("Subject", "subject"), ("Task", "task")):
        value = trigger.get(name)
        if value:
            lines.append(f"{label}: {value}")
    body = trigger.get("body") or trigger.get("salient_body")
    if body:
        lines += ["", str(body)]
    return "\n".join(lines)


def prompt_size(system: str, user: str, history: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """The `prompt.size` fields of an opening prompt."""
    system_bytes, user_bytes = len(system.encode()), len(user.encode())
    message_bytes = sum(len(message_text(m).encode()) for m in history)
    tool_bytes = len(json.dumps([asdict(t) for t in tools], ensure_ascii=False).encode()) if tools else 0
    total = system_bytes + user_bytes + message_bytes + tool_bytes
    return {"system_bytes": system_bytes, "user_bytes": user_bytes, "message_bytes": message_bytes,
            "tool_bytes": tool_bytes, "tool_count": len(tools), "approx_tokens": -(-total // 4)}
