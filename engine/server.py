"""The node's HTTP listener: Daphne serving the Channels ASGI application on the node's own
event loop (DESIGN.md, "Shape"; seed 002, "The listener comes up before the boot does").

The socket is bound here, before the boot, so a port already taken fails the node at once,
naming the address; Daphne adopts the bound socket. The node's main coroutine runs on the
same loop as the reactor; when it returns, the listener closes and the process exits with
the node's code.
"""
from __future__ import annotations

import errno
import logging
import socket
from typing import Awaitable, Callable

log = logging.getLogger("engine.server")


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
        why = "already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise ListenerError(f"{field}: {host}:{port} {why}") from None
    sock.setblocking(False)
    return sock


def serve(app, sock: socket.socket | None, main: Callable[[], Awaitable[int]],
          extra: tuple[socket.socket, ...] = ()) -> int:
    """Run `main()` on the reactor's asyncio loop, with Daphne serving `app` on `sock` when
    given; return main's exit code once it and the listener are done. Without a socket
    (`api.port: 0`) there is nothing to serve and main runs on a plain asyncio loop. `extra`
    sockets (the api.public listener) are served by the same `app`, which tells them apart by
    the local port in each request's scope."""
    if sock is None:
        import asyncio

        return asyncio.run(main())
    import daphne.server  # installs Twisted's asyncio reactor; must come before `reactor`
    from twisted.internet import reactor

    loop = reactor._asyncioEventloop
    outcome = {"code": 1}

    async def runner() -> None:
        try:
            outcome["code"] = await main()
        except BaseException:
            log.exception("node_crashed")
            outcome["code"] = 1
        finally:
            # The reactor may not count as running yet when a boot fails at once.
            if reactor.running:
                reactor.stop()
            else:
                reactor.callWhenRunning(reactor.stop)
    server = daphne.server.Server(
        application=app,
        endpoints=["adopted"],  # replaced below: the socket is adopted, not described
        signal_handlers=False,
        verbosity=0,
        http_timeout=None,
        websocket_timeout=86400,
        application_close_timeout=5,
        server_name="crewlet",
    )

    server.endpoints = []

    def adopt() -> None:
        # Runs on the loop's first turn, after run() made the factories: the socket bound
        # before the boot becomes Daphne's listener.
        for bound in (sock, *extra):
            port = reactor.adoptStreamPort(bound.fileno(), bound.family, server.http_factory)
            server.listeners.append(port)
        loop.create_task(runner())

    loop.call_soon(adopt)
    server.run()
    for bound in (sock, *extra):
        bound.close()
    return outcome["code"]
