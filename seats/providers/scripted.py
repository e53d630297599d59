"""The scripted provider: `kind: scripted` (DESIGN.md, deliberate difference 4: deterministic and
offline, for demos and tests).

Its reply is the configured `reply` template with `{trigger_summary}`, `{seat}`, `{role}` and
`{turn}` filled in -- by plain replacement, so a stray brace in a template is text rather than
an error. Token counts are a deterministic function of text length (a quarter of the
characters, rounded up: the usual rule of thumb for English under a BPE tokenizer), so a
budget test knows to the token what a round costs. `delay_seconds` is a configured latency,
awaited without blocking the loop.
"""
from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping

from engine.config.company import Scripted
from seats.providers.base import Completion, Message

MODEL = "scripted"
PLACEHOLDERS = ("trigger_summary", "seat", "role", "turn")


def approx_tokens(text: str) -> int:
    """ceil(len/4): the scripted provider's token count for `text`."""
    return math.ceil(len(text) / 4)


def fill(template: str, variables: Mapping[str, str]) -> str:
    """`template` with each known `{placeholder}` replaced; anything else left as written."""
    out = template
    for name in PLACEHOLDERS:
        out = out.replace("{" + name + "}", str(variables.get(name, "")))
    return out


class ScriptedProvider:
    """A Provider that answers with its template, after its configured delay."""

    def __init__(self, config: Scripted, *, variables: Mapping[str, str] | None = None) -> None:
        self.key = config.name
        self.model = MODEL
        self.config = config
        self.variables = dict(variables or {})

    async def complete(self, messages: list[Message], *, max_tokens: int) -> Completion:
        """The filled template; cut to `max_tokens` (stop_reason max_tokens) when longer."""
        if self.config.delay_seconds > 0:
            await asyncio.sleep(self.config.delay_seconds)
        text = fill(self.config.reply, self.variables)
        stop_reason = "end"
        if approx_tokens(text) > max_tokens:
            text, stop_reason = text[: max_tokens * 4], "max_tokens"
        prompt = "".join(m.get("content", "") for m in messages)
        return Completion(text=text, tokens_in=approx_tokens(prompt), tokens_out=approx_tokens(text),
                          stop_reason=stop_reason, model=MODEL)
