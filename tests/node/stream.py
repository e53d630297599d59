"""The dashboard's /ws/stream of a node process, read as a browser's page reads it: the first
frame (the snapshot) and a query's answer, with the reader token's bearer subprotocol."""
from __future__ import annotations

import json
from typing import Any

from websockets.sync.client import connect as ws_connect

from tests.node.harness import READER, NodeProcess


def frame_of(socket, kind: str) -> dict:
    """The next frame of `kind` (a message may batch several frames as a JSON array)."""
    while True:
        message = json.loads(socket.recv(timeout=10))
        for frame in message if isinstance(message, list) else [message]:
            if frame.get("type") == kind:
                return frame


def snapshot(node: NodeProcess, query: str | None = None, args: dict[str, Any] | None = None) -> tuple[dict, Any]:
    """The node's snapshot frame, and the answer to `query` (None without one)."""
    with ws_connect(f"ws://127.0.0.1:{node.port}/ws/stream", subprotocols=["crewlet.bearer", READER],
                    max_size=None, open_timeout=10) as socket:
        first = frame_of(socket, "snapshot")
        if query is None:
            return first, None
        socket.send(json.dumps({"id": 1, "query": query, "args": args or {}}))
        return first, frame_of(socket, "answer")["result"]


def seat_row(frame: dict, handle: str) -> dict:
    [row] = [r for r in frame["seats"] if r["handle"] == handle]
    return row
