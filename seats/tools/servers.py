"""The node's tool servers: every `tools.mcp` entry of the applied revision, started or dialled
(DESIGN.md, deliberate difference 4; seed 002, "While a node is starting": a tool server
"that runs out of time costs only its own tools, and the boot carries on").

`ToolServers` is told about each revision (`on_company`) and brings the running set in line
with it: a server the revision no longer names is stopped, one whose entry changed is
restarted, a new one is started. They start concurrently and each is bounded by its own
startup timeout (twice: its start, its first tool listing), so applying a revision waits for
the slowest server and no longer. A server that fails is logged and shown (`describe()`, which
the node's /health carries) and costs only its own tools. `stop()` ends them all; a stdio
child also dies with the node if the node dies first (`leash.py`).

`tools_for(company, seat)` is what a turn is offered: the tools of every ready server the seat
may use (`seats`, `roles`, or every agent seat).
"""
from __future__ import annotations

import asyncio
import importlib
import logging
from pathlib import Path
from typing import Any, Callable

from engine.config.company import Company, Seat
from seats.tools.remote import READY, RemoteTool

log = logging.getLogger("seats.tools.servers")

Report = Callable[[tuple[dict[str, Any], ...]], None]


class ToolServers:
    """The `tools.mcp` servers of the company this node runs. `cwd` is where stdio commands run;
    `report` is handed each server's state whenever it changes (for /health)."""

    name = "tool_servers"

    def __init__(self, *, cwd: Path, report: Report | None = None) -> None:
        self.cwd = cwd
        self.report = report
        self.connections: dict[str, Any] = {}  # name -> seats.tools.mcp.McpConnection
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Nothing of its own to start: servers start when a revision names them."""

    async def on_company(self, company: Company) -> None:
        """Bring the running servers in line with `company.tools.mcp`; returns once every server
        the revision names is ready or failed."""
        async with self._lock:
            wanted = {server.name: server for server in company.tools.mcp}
            going = [c for name, c in self.connections.items()
                     if name not in wanted or c.config != wanted[name]]
            await asyncio.gather(*(self._stop_one(c) for c in going))
            for connection in going:
                self.connections.pop(connection.name, None)
            new = [config for name, config in wanted.items() if name not in self.connections]
            # the SDK is imported off the loop, the first time a server is wanted (see remote.py)
            connection = (await asyncio.to_thread(importlib.import_module, "seats.tools.mcp")).McpConnection if new else None
            starting = [connection(config, cwd=self.cwd) for config in new]
            for connection in starting:
                self.connections[connection.name] = connection
            self._report()
            await asyncio.gather(*(self._start_one(c) for c in starting))
            self._report()

    async def stop(self, cut: bool = False) -> None:
        """Stop every server (a stdio child's stdin is closed, then it is terminated)."""
        async with self._lock:
            connections, self.connections = list(self.connections.values()), {}
            await asyncio.gather(*(self._stop_one(c) for c in connections))
            self._report()

    def tools_for(self, company: Company, seat: Seat) -> list[RemoteTool]:
        """The tools of every ready server `seat` may use, in the order the company lists them."""
        out: list[RemoteTool] = []
        for config in company.tools.mcp:
            connection = self.connections.get(config.name)
            if connection is not None and connection.state == READY and config.serves(seat):
                out.extend(connection.tools)
        return out

    def describe(self) -> tuple[dict[str, Any], ...]:
        """Each server's state, reason, tool count and tool names."""
        return tuple(c.describe() for c in self.connections.values())

    async def _start_one(self, connection: Any) -> None:
        log.info("mcp_server_starting", extra={"server": connection.name, "transport": connection.config.transport})
        try:
            await connection.start()
        except Exception:  # a bug in starting one server must not cost the others
            log.exception("mcp_server_start_crashed", extra={"server": connection.name})
        self._report()

    async def _stop_one(self, connection: Any) -> None:
        try:
            await connection.stop()
        except Exception:
            log.exception("mcp_server_stop_failed", extra={"server": connection.name})
        log.info("mcp_server_stopped", extra={"server": connection.name})

    def _report(self) -> None:
        if self.report is not None:
            try:
                self.report(self.describe())
            except Exception:
                log.exception("mcp_server_report_failed")

