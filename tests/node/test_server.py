"""The node's listener (engine.node.server) on real sockets: the order its sockets close in and the
requests they finish on the way (seed 002, "Draining": "Once the drain completes the public
listener closes first and api.port after it, each waiting up to five seconds for its
requests, so the probes answer until the very end")."""
from __future__ import annotations

import asyncio
import http.client
import threading

import pytest

from engine.node.server import ListenerError, bind, serve
from tests.node.harness import eventually


def _get(port: int, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _answers(port: int) -> bool:
    try:
        return _get(port, "/health", timeout=1.0)[0] == 200
    except OSError:
        return False


def test_the_public_listener_closes_first_and_api_port_answers_until_it_has():
    api, public = bind("127.0.0.1", 0), bind("127.0.0.1", 0, field="api.public.port")
    api_port, public_port = api.getsockname()[1], public.getsockname()[1]
    slow_started, release, stop = threading.Event(), threading.Event(), threading.Event()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == "/slow":  # a request in flight on the public listener as the node stops
            slow_started.set()
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 30)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main() -> int:
        await asyncio.get_running_loop().run_in_executor(None, stop.wait, 60)
        return 0

    outcome: dict[str, object] = {}
    server = threading.Thread(target=lambda: outcome.update(code=serve(app, api, main, extra=(public,))), daemon=True)
    server.start()
    eventually(lambda: _answers(api_port) and _answers(public_port), 10, "both listeners to answer")

    slow: dict[str, object] = {}
    client = threading.Thread(target=lambda: slow.update(answer=_get(public_port, "/slow")), daemon=True)
    client.start()
    assert slow_started.wait(10)
    stop.set()  # main returns: the listeners close, the public one first

    # While the public listener waits for its request, it takes no new connection and api.port
    # still answers its probes.
    eventually(lambda: not _answers(public_port), 10, "the public listener to stop taking connections")
    assert _answers(api_port)
    release.set()
    client.join(10)
    assert slow.get("answer") == (200, b"ok")  # the request in flight was finished, not cut
    server.join(15)
    assert outcome.get("code") == 0
    assert not _answers(api_port)


def test_a_port_already_taken_is_refused_naming_the_field_and_address():
    taken = bind("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(ListenerError, match=rf"api.public.port: 127.0.0.1:{port} is already in use.*pick another api.public.port"):
            bind("127.0.0.1", port, field="api.public.port")
    finally:
        taken.close()
