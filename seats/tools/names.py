"""Tool names as the model sees them (DESIGN.md, deliberate difference 4; issue "Turns that act":
"namespaced by server and valid for every provider").

Both providers accept a tool name matching `^[a-zA-Z0-9_-]{1,64}$`. A server's tool is named
`<server>__<tool>`: the server's name (1 to 32 letters, digits and '-', checked by the company
rules) and the tool's own name with every other character made '_'. A name that would pass 64
characters keeps its head and ends in a short digest of the whole, so two long tools of one
server stay two names. Built-in tools (`builtins.py`) have no `__`, so they never meet a
server's.
"""
from __future__ import annotations

import hashlib
import re

SEPARATOR = "__"
MAX_NAME = 64  # OpenAI's and Anthropic's limit on a tool name
VALID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_OUTSIDE = re.compile(r"[^a-zA-Z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """The name the model calls `tool` of `server` by."""
    name = f"{server}{SEPARATOR}{_OUTSIDE.sub('_', tool) or '_'}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(f"{server}/{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - len(digest) - 1]}_{digest}"


def is_valid(name: str) -> bool:
    """Whether every provider accepts `name` as a tool name."""
    return bool(VALID.match(name))
