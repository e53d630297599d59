"""A real MCP tool server for the tests, written with the `mcp` SDK's FastMCP.

    python tests/seats/toolserver.py stdio
    python tests/seats/toolserver.py http PORT

Every call it receives is appended to $CALLS_FILE as one JSON line {"tool", "arguments"}, so a
test asks the server, not the engine, what was called. $MODE makes it misbehave on purpose:
  exit_at_start  writes a reason to stderr and exits 3 before speaking MCP
  hang_at_start  sleeps before it serves (the handshake never answers in time)
  hang_listing   answers the handshake, then never answers tools/list
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from mcp.server.fastmcp import FastMCP

MODE = os.environ.get("MODE", "")
CALLS_FILE = os.environ.get("CALLS_FILE", "")


class TestServer(FastMCP):
    async def list_tools(self):
        if MODE == "hang_listing":
            await asyncio.sleep(3600)
        return await super().list_tools()


server = TestServer("testtools", log_level="WARNING")


def record(tool: str, **arguments) -> None:
    if CALLS_FILE:
        with open(CALLS_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": tool, "arguments": arguments, "pid": os.getpid()}) + "\n")


@server.tool()
def append(text: str) -> str:
    """Append a note; returns what was stored."""
    record("append", text=text)
    return f"stored: {text}"


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    record("add", a=a, b=b)
    return str(a + b)


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason."""
    record("fail", reason=reason)
    raise ValueError(f"refused: {reason}")


@server.tool()
def big(size: int) -> str:
    """Returns `size` bytes of text."""
    record("big", size=size)
    return "x" * size


@server.tool()
def crash() -> str:
    """Kills the server mid-call."""
    record("crash")
    sys.stdout.flush()
    os._exit(9)


_meeting: dict[str, asyncio.Event] = {}
_arrived: dict[str, int] = {}


@server.tool()
async def meet(group: str, count: int) -> str:
    """Waits (up to 10 s) until `count` calls of `group` are in flight together: "met", else "alone"."""
    record("meet", group=group, count=count)
    _arrived[group] = _arrived.get(group, 0) + 1
    event = _meeting.setdefault(group, asyncio.Event())
    if _arrived[group] >= count:
        event.set()
    try:
        await asyncio.wait_for(event.wait(), 10)
        return "met"
    except TimeoutError:
        return "alone"


@server.tool()
async def slow(seconds: float) -> str:
    """Answers after `seconds`."""
    record("slow", seconds=seconds)
    await asyncio.sleep(seconds)
    return "slept"


if __name__ == "__main__":
    if MODE == "exit_at_start":
        sys.stderr.write("toolserver: cannot open the database\n")
        sys.exit(3)
    if MODE == "hang_at_start":
        time.sleep(3600)
    if sys.argv[1:2] == ["http"]:
        server.settings.port = int(sys.argv[2])
        server.run(transport="streamable-http")
    else:
        server.run()
