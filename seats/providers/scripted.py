"""The scripted provider: `kind: scripted` (DESIGN.md, deliberate difference 4: deterministic and
offline, for demos and tests; it "can script tool calls").

Its reply is the configured `reply` template with `{trigger_summary}`, `{seat}`, `{role}` and
`{turn}` filled in -- by plain replacement, so a stray brace in a template is text rather than
an error. With `tool_calls` configured, its first round of a turn asks for those calls (each
`{server, tool, arguments}` named as the model sees it, `<server>__<tool>`, with the same
placeholders filled in every text argument) and stops with `tool_use`; once the conversation
holds their results it replies. Token counts are a deterministic function of text length (a
quarter of the characters, rounded up: the usual rule of thumb for English under a BPE
tokenizer), so a budget test knows to the token what a round costs. `delay_seconds` is a
configured latency, awaited without blocking the loop.
"""
from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from typing import Any, Sequence

from engine.config.company import Scripted
from seats.providers.base import Completion, Message, ToolCall, ToolSpec, message_text
from seats.tools.names import tool_name

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


def fill_arguments(value: Any, variables: Mapping[str, str]) -> Any:
    """A scripted call's arguments with the placeholders filled in every text, at any depth."""
    if isinstance(value, str):
        return fill(str(value), variables)
    if isinstance(value, dict):
        return {str(k): fill_arguments(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_arguments(v, variables) for v in value]
    return value


def tools_answered(messages: list[Message]) -> bool:
    """Whether the conversation already holds tool results after its last person's message."""
    for message in reversed(messages):
        if message.get("role") == "tool":
            return True
        if message.get("role") == "user":
            return False
    return False


class ScriptedProvider:
    """A Provider that asks for its scripted tool calls once, then answers with its template."""

    def __init__(self, config: Scripted, *, variables: Mapping[str, str] | None = None) -> None:
        self.key = config.name
        self.model = MODEL
        self.config = config
        self.variables = dict(variables or {})

    async def complete(self, messages: list[Message], *, max_tokens: int,
                       tools: Sequence[ToolSpec] = ()) -> Completion:
        """The scripted calls (stop_reason tool_use) on a turn's first round; otherwise the
        filled template, cut to `max_tokens` (stop_reason max_tokens) when longer."""
        if self.config.delay_seconds > 0:
            await asyncio.sleep(self.config.delay_seconds)
        prompt = approx_tokens("".join(message_text(m) for m in messages))
        if self.config.tool_calls and not tools_answered(messages):
            calls = tuple(ToolCall(id=f"call_{i + 1}", name=tool_name(c.server, c.tool),
                                   arguments=fill_arguments(dict(c.arguments), self.variables))
                          for i, c in enumerate(self.config.tool_calls))
            asked = message_text({"tool_calls": calls})
            return Completion(text="", tokens_in=prompt, tokens_out=approx_tokens(asked), stop_reason="tool_use",
                              model=MODEL, tool_calls=calls)
        text = fill(self.config.reply, self.variables)
        stop_reason = "end"
        if approx_tokens(text) > max_tokens:
            text, stop_reason = text[: max_tokens * 4], "max_tokens"
        return Completion(text=text, tokens_in=prompt, tokens_out=approx_tokens(text),
                          stop_reason=stop_reason, model=MODEL)
