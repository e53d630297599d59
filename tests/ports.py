"""Ports for the servers tests start, with no window in which another process can take them.

A port found free, released and bound later by a server is a race: any outgoing connection on
the host, or another test's port-0 bind, may be handed it in between. A `PortHold` instead
keeps a socket bound to the port (with SO_REUSEADDR, never listening) for as long as the test
needs the number. On Linux the kernel then hands that port to no port-0 bind and to no
outgoing connection, while a server that binds it by number with SO_REUSEADDR -- the node's
listener (`engine.server.bind`) and nats-server both do -- still may, as long as nothing
listens on it yet. Held across a node's restart, the port is the node's again when it comes
back; held with nothing listening, connecting to it is refused at once.

Where the server can bind port 0 and say what it got (an in-process server, nats-server's
ports file), tests do that instead; a hold is for a number that must be known before the
server starts: a node's api.port written into its own config, a cluster member's route port
its peers must name.
"""
from __future__ import annotations

import socket


class PortHold:
    """One 127.0.0.1 port, kept from everyone but the server a test starts on it."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._sock: socket.socket | None = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.port: int = self._sock.getsockname()[1]

    def release(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "PortHold":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()
