"""A tool server's tools as a turn sees them, apart from the SDK that reaches them.

The `mcp` SDK takes seconds to import on a loaded machine, and this app's modules are reached
from the URL map (through `seats.api`), which the node loads on its event loop while it answers
its probes. So what a turn, the toolbox and the node service need to name -- a server's states,
its tools, a call's outcome -- lives here, and `mcp.py`, which imports the SDK, is loaded off the
loop by `servers.py` when a revision first names a server.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from seats.providers.base import ToolSpec

STARTING, READY, FAILED, STOPPED = "starting", "ready", "failed", "stopped"


@dataclass(frozen=True)
class CallOutcome:
    """What a call came back with: the result as text, whether the server called it an error,
    and `error` when there is no result at all (timeout, crash, refusal)."""

    text: str = ""
    is_error: bool = False
    error: str = ""


class Connection(Protocol):
    """A tool server's connection, as a tool call uses it."""

    name: str
    state: str

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallOutcome: ...


@dataclass(frozen=True)
class RemoteTool:
    """A tool of a ready server, as the model sees it (`spec`, namespaced) and as the server
    knows it (`tool`)."""

    spec: ToolSpec
    server: str
    tool: str
    connection: Connection
