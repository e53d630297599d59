"""One MCP tool server's connection, through the official `mcp` SDK (DESIGN.md, deliberate
difference 4; seed 002, "While a node is starting": "its shared MCP servers -- each bounded by
its own startup_timeout_seconds, for its start and again for its first tool listing").

A connection lives in one task of its own, because the SDK's transports are anyio context
managers that must be entered and left by the same task. That task:
  1. opens the transport: a stdio child (on the leash, `leash.py`, so it dies with the node;
     its environment is the SDK's safe default plus the server's `env`; its stderr is read
     line by line into the debug log, and its tail goes with the failure's log line), or a
     streamable HTTP session with the server's `headers`;
  2. initializes the session, within startup_timeout_seconds;
  3. lists its tools (every page), within startup_timeout_seconds again;
  4. serves calls until it is told to stop, then closes the session (a stdio child gets its
     stdin closed, then SIGTERM, then SIGKILL, the SDK's shutdown sequence).
A server that fails any step is `failed` with the reason; it costs only its own tools. (This
module imports the SDK; what a turn needs to name without it is in `remote.py`.)

`call` is made from a turn's task while the connection's task serves. A call is bounded by
`call_timeout_seconds`; an error, a timeout, a crash mid-call or a result that cannot be read
comes back as a CallOutcome with the error, never as an exception. A crash (the connection
closed under a call) also marks the server failed, so later rounds stop offering its tools.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import time
from collections import deque
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

from engine.config.company import McpServer
from seats.providers.base import ToolSpec
from seats.tools.names import tool_name
from seats.tools.remote import FAILED, READY, STARTING, STOPPED, CallOutcome, RemoteTool

log = logging.getLogger("seats.tools.mcp")

LEASH = Path(__file__).with_name("leash.py")
STDERR_TAIL_LINES = 20     # what a failure reason quotes of a child's stderr
MAX_LISTING_PAGES = 100    # a server whose tools/list cursor never ends is cut here
STOP_SECONDS = 10.0        # the SDK's own shutdown takes up to 2 s + 2 s; past this, cancel
HTTP_TIMEOUT = httpx.Timeout(30.0, read=300.0)  # the SDK's defaults: a response stream may stay open
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class McpConnection:
    """One `tools.mcp` entry, started with `start()` and ended with `stop()`. `cwd` is where a
    stdio command runs (and what its relative paths mean)."""

    def __init__(self, config: McpServer, *, cwd: Path) -> None:
        self.config = config
        self.name = config.name
        self.cwd = cwd
        self.state = STARTING
        self.reason = ""
        self.since = time.time()
        self.tools: list[RemoteTool] = []
        self._session: ClientSession | None = None
        self._settled = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stderr: deque[str] = deque(maxlen=STDERR_TAIL_LINES)

    # -- life --------------------------------------------------------------------------------
    async def start(self) -> bool:
        """Start the server and wait until it is ready or failed (each step bounded by the
        server's startup timeout); whether it is ready."""
        self._task = asyncio.create_task(self._run(), name=f"mcp:{self.name}")
        await self._settled.wait()
        return self.state == READY

    async def stop(self) -> None:
        """Close the session and end the child; idempotent."""
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), STOP_SECONDS)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if self.state in (STARTING, READY):
            self._set(STOPPED, "")

    def describe(self) -> dict[str, Any]:
        """The server as /health shows it: state, reason, tool count and names, transport."""
        return {"name": self.name, "transport": self.config.transport, "state": self.state,
                "reason": self.reason, "tool_count": len(self.tools),
                "tools": [t.spec.name for t in self.tools], "since": self.since}

    async def _run(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._open(stack)
                session = await stack.enter_async_context(ClientSession(read, write))
                # A step that runs out of time ends here, inside the transport, so leaving the
                # contexts shuts the server down the ordinary way.
                if await self._started(session):
                    await self._stop.wait()
                self._session = None
        except asyncio.CancelledError:
            self._fail("stopped while starting")
            raise
        except Exception as exc:  # a spawn, a handshake or a listing that went wrong: named
            self._fail(_describe(exc))
        finally:
            self._session = None
            self._settled.set()

    async def _started(self, session: ClientSession) -> bool:
        """Initialize and list, each within the startup timeout; whether the server is ready."""
        timeout = self.config.startup_timeout_seconds
        try:
            with anyio.fail_after(timeout):
                await session.initialize()
        except TimeoutError:
            self._fail(f"did not start within {timeout:g} s (startup_timeout_seconds)")
            return False
        try:
            with anyio.fail_after(timeout):
                listed = await self._list(session)
        except TimeoutError:
            self._fail(f"did not list its tools within {timeout:g} s (startup_timeout_seconds)")
            return False
        self.tools = [RemoteTool(spec, self.name, tool, self) for tool, spec in listed]
        self._session = session
        self._set(READY, "")
        self._settled.set()
        log.info("mcp_server_ready", extra={"server": self.name, "tools": len(self.tools),
                                            "transport": self.config.transport})
        return True

    async def _open(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        """The transport's two streams, entered on `stack`."""
        if self.config.transport == "stdio":
            command = list(self.config.command or [])
            missing = _missing(command[0], self.cwd, self.config.env)
            if missing:
                raise FileNotFoundError(2, missing, command[0])
            params = StdioServerParameters(
                command=sys.executable, args=["-I", "-S", str(LEASH), str(os.getpid()), *command],
                env=dict(self.config.env), cwd=self.cwd)
            errlog = stack.enter_context(_StderrPipe(self.name, self._stderr))
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog.writer))
            return read, write
        client = await stack.enter_async_context(httpx.AsyncClient(headers=dict(self.config.headers),
                                                                   timeout=HTTP_TIMEOUT))
        read, write, _ = await stack.enter_async_context(streamable_http_client(self.config.url, http_client=client))
        return read, write

    async def _list(self, session: ClientSession) -> list[tuple[str, ToolSpec]]:
        """Every tool the server lists, each with the spec the model sees."""
        out: list[tuple[str, ToolSpec]] = []
        cursor: str | None = None
        for _ in range(MAX_LISTING_PAGES):
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            for tool in page.tools:
                schema = tool.inputSchema if isinstance(tool.inputSchema, dict) else EMPTY_SCHEMA
                if schema.get("type") != "object":
                    schema = EMPTY_SCHEMA
                out.append((tool.name, ToolSpec(name=tool_name(self.name, tool.name),
                                                description=tool.description or tool.title or "",
                                                input_schema=schema)))
            cursor = page.nextCursor
            if not cursor:
                break
        return out

    def _set(self, state: str, reason: str) -> None:
        self.state, self.reason, self.since = state, reason, time.time()

    def _fail(self, reason: str) -> None:
        """Failed, with the reason /health shows; the log line adds the tail of a stdio child's
        stderr, which only the log gets (/health answers anybody, and a child may print anything)."""
        if self.state != FAILED:
            self._set(FAILED, reason)
            self.tools = []
            tail = " | ".join(line for line in self._stderr if line.strip())[-600:]
            log.warning("mcp_server_failed", extra={"server": self.name, "reason": reason, "stderr": tail})
        self._settled.set()

    # -- calls -------------------------------------------------------------------------------
    async def call(self, tool: str, arguments: dict[str, Any]) -> CallOutcome:
        """Call `tool` (the server's own name) with `arguments`, bounded by call_timeout_seconds."""
        session, limit = self._session, self.config.call_timeout_seconds
        if session is None or self.state != READY:
            return CallOutcome(error=f"the tool server {self.name} is {self.state}"
                                     + (f" ({self.reason})" if self.reason else ""))
        try:
            # the SDK bounds the wait for the answer; the outer bound also covers a request the
            # child never reads (its stdin full), which the SDK's own timeout does not
            async with asyncio.timeout(limit + 1.0):
                result = await session.call_tool(tool, arguments, read_timeout_seconds=timedelta(seconds=limit))
        except TimeoutError:
            return CallOutcome(error=f"no answer within {limit:g} s (call_timeout_seconds)")
        except McpError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                self._fail(f"the connection closed during a call of {tool}")
                return CallOutcome(error=f"the tool server {self.name} closed the connection during the call")
            if "timed out" in (exc.error.message or "").lower():
                return CallOutcome(error=f"no answer within {limit:g} s (call_timeout_seconds)")
            return CallOutcome(error=f"the tool server refused the call: {exc.error.message}")
        except Exception as exc:  # a result the SDK could not read, a broken transport
            return CallOutcome(error=f"the call failed: {_describe(exc)}")
        return CallOutcome(text=result_text(result), is_error=bool(result.isError))


def result_text(result: types.CallToolResult) -> str:
    """A tool result as the text the model reads: text blocks as they are, anything else named."""
    parts: list[str] = []
    for block in result.content or ():
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, (types.ImageContent, types.AudioContent)):
            parts.append(f"[{block.type} {block.mimeType}, about {len(block.data) * 3 // 4:,} bytes]")
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource {resource.uri}]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource {block.uri}]")
    if not parts and result.structuredContent is not None:
        parts.append(json.dumps(result.structuredContent, ensure_ascii=False))
    return "\n".join(parts)


def _describe(exc: BaseException) -> str:
    """An exception as one line: the innermost of an exception group, its type and message."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, McpError):
        if exc.error.code == types.CONNECTION_CLOSED:
            return "the server closed the connection before it answered (its stderr is in the log)"
        return exc.error.message
    if isinstance(exc, FileNotFoundError):
        return f"cannot start it: {exc.filename}: {exc.strerror}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _missing(program: str, cwd: Path, env: dict[str, str]) -> str:
    """Why `program` cannot be started ("" when it can): a path is read from `cwd`, a bare name
    is looked up on the PATH the child gets."""
    if os.sep in program:
        path = program if os.path.isabs(program) else os.path.join(cwd, program)
        if not os.path.exists(path):
            return f"no such file (from {cwd})"
        return "" if os.access(path, os.X_OK) else "not executable"
    search = env.get("PATH") or os.environ.get("PATH", "")
    return "" if shutil.which(program, path=search) else "not found on the PATH"


class _StderrPipe:
    """A pipe for a stdio child's stderr: the write end goes to the child, the read end is read
    on the loop, each line logged at debug and kept in `tail`."""

    def __init__(self, server: str, tail: deque[str]) -> None:
        self.server = server
        self.tail = tail
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w")
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = b""
        loop = asyncio.get_running_loop()
        loop.add_reader(read_fd, self._readable)
        self._loop = loop

    def __enter__(self) -> "_StderrPipe":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._drain()
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self._reader.fileno())
        for f in (self.writer, self._reader):
            with contextlib.suppress(Exception):
                f.close()

    def _readable(self) -> None:
        try:
            chunk = os.read(self._reader.fileno(), 65536)
        except OSError:
            chunk = b""
        if not chunk:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._reader.fileno())
            return
        self._take(chunk)

    def _drain(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            os.set_blocking(self._reader.fileno(), False)
            while chunk := os.read(self._reader.fileno(), 65536):
                self._take(chunk)
        if self._buffer:
            self._line(self._buffer)
            self._buffer = b""

    def _take(self, chunk: bytes) -> None:
        *lines, self._buffer = (self._buffer + chunk).split(b"\n")
        for line in lines:
            self._line(line)
        if len(self._buffer) > 65536:  # a line with no end: keep its head
            self._line(self._buffer[:2000])
            self._buffer = b""

    def _line(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip()
        self.tail.append(line[:500])
        log.debug("mcp_server_stderr", extra={"server": self.server, "line": line[:2000]})
