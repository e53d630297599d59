"""The node's HTTP listener: the Channels ASGI application served on the node's own event loop
(DESIGN.md, "Shape"; seed 002, "The listener comes up before the boot does").

The socket is bound here, before the boot, so a port already taken fails the node at once,
naming the address; the server adopts the bound socket. The node's main coroutine runs on
the same loop as the listener; when it returns, the listener closes and the process exits
with the node's code.

The server is Uvicorn (httptools' parser) on uvloop rather than Daphne on Twisted's asyncio
reactor, which DESIGN.md names: the application is the same Channels ASGI app, and the one
loop that carries the HTTP surface also carries every broker client and consume loop, so
its cost per callback is the node's throughput (README, "Performance": webhooks).

The limits on what a client may send before the application sees it -- a request's head, a
stalled body, the number of open connections -- are `engine.node.limits`, applied to every socket
(README, "Security"). `api.trusted_proxies` are the only peers whose X-Forwarded-For and
X-Forwarded-Proto are believed (Uvicorn's proxy headers, for those addresses alone), so a
session cookie behind a TLS proxy is marked Secure and a client is known by its own address.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from typing import Awaitable, Callable

import uvicorn

from engine.node import limits

log = logging.getLogger("engine.node.server")

# What an open connection (a dashboard socket, a slow response) gets to finish once the node
# has stopped, before it is cut.
GRACEFUL_CLOSE_SECONDS = 5
# The largest frame a /ws/stream client may send; the stream takes only small control frames.
WS_MAX_BYTES = 1024 * 1024


class ListenerError(Exception):
    pass


def bind(host: str, port: int, field: str = "api.port") -> socket.socket:
    """A listening TCP socket on host:port; ListenerError naming the field and address."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ListenerError(f"api.host: cannot resolve {host!r} ({exc.strerror})") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(512)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ListenerError(f"{field}: {host}:{port} is already in use (another node, or another program); "
                                f"{_another_port(field)}") from None
        raise ListenerError(f"{field}: {host}:{port} {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def _another_port(field: str) -> str:
    """How to pick another port for the listener `field` names."""
    if field == "api.port":
        return ("pick another with --api-port 8123 or api.port in the config (examples/crewlet.yaml reads "
                "CREWLET_PORT: `make run PORT=8123`, or `export CREWLET_PORT=8123`)")
    return f"pick another {field} in the config"


def serve(app, sock: socket.socket | None, main: Callable[[], Awaitable[int]],
          extra: tuple[socket.socket, ...] = (), trusted_proxies: tuple[str, ...] = ()) -> int:
    """Run `main()` on one event loop (uvloop's where installed), with Uvicorn serving `app` on
    `sock` when given; return main's exit code once it and the listener are done. Without a
    socket (`api.port: 0`) there is nothing to serve. `extra` sockets (the api.public listener)
    are served by the same `app`, which tells them apart by the local port in each request's
    scope. `trusted_proxies` (addresses or CIDR blocks) may set the client and the scheme
    through X-Forwarded-For and X-Forwarded-Proto."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(_serve_and_run(app, sock, main, extra, tuple(trusted_proxies)))


def loop_factory():
    """uvloop's loop when the package is installed (it is a dependency): the node's one loop
    carries the HTTP surface, every broker client and the consume loops, so its per-callback
    cost is the node's throughput. The standard loop otherwise."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a dependency; kept so a bare checkout still runs
        return None
    return uvloop.new_event_loop


async def _serve_and_run(app, sock, main, extra, trusted_proxies=()) -> int:
    # One server per socket, in the order they close (seed 002, "Draining": "Once the drain
    # completes the public listener closes first and api.port after it, each waiting up to
    # five seconds for its requests, so the probes answer until the very end").
    listeners: list[tuple[_Listener, asyncio.Task]] = []
    if sock is not None:
        for bound in (*extra, sock):
            listener = _Listener(_config(app, trusted_proxies))
            listeners.append((listener, asyncio.create_task(listener.serve(sockets=[bound]))))
    try:
        code = await main()
    except BaseException:
        log.exception("node_crashed")
        code = 1
    finally:
        for listener, serving in listeners:
            listener.should_exit = True
            await serving
    return code


def _config(app, trusted_proxies: tuple[str, ...] = ()) -> uvicorn.Config:
    protocol = type("NodeHttpProtocol", (limits.GuardedHttpToolsProtocol,),
                    {"max_connections": limits.connection_limit()})
    return uvicorn.Config(
        app,
        http=protocol,
        ws="websockets-sansio",
        lifespan="off",          # the node's own boot is the lifespan
        log_config=None,         # engine.node.logconfig owns logging
        access_log=False,        # a line per request is not an operator's log
        server_header=False,
        # scope["client"] is the peer, unless the peer is one of api.trusted_proxies.
        proxy_headers=bool(trusted_proxies),
        forwarded_allow_ips=list(trusted_proxies) or None,
        timeout_keep_alive=limits.KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=GRACEFUL_CLOSE_SECONDS,
        ws_max_size=WS_MAX_BYTES,
    )


class _Listener(uvicorn.Server):
    """Uvicorn's server without its signal capture: the node installs its own handlers (a
    first SIGTERM drains, a second forces), and a library must not take them over."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield
