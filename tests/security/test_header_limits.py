"""Finding 1: no limit on a request's head, its time, or the connections a node holds
(engine.node.limits; README, "Security"). Fifteen clients each sending a 100 MiB header held the
loop long enough to lose the presence lease; half-sent requests stayed open for ever; enough
connections exhausted the node's file descriptors."""
from __future__ import annotations

import socket
import threading

import pytest

from engine.node.limits import BODY_IDLE_SECONDS, HEAD_SECONDS, MAX_CONNECTIONS, MAX_HEAD_BYTES, connection_limit
from tests.security.conftest import no_traceback, still_ready
from tests.security.wire import closed, connect, detail, read_answer, send_until_answered

pytestmark = pytest.mark.timeout(180)

HUNDRED_MIB = 100 * 1024 * 1024


def test_fifteen_hundred_mebibyte_headers_are_refused_431_and_the_node_stays_ready(node):
    answers: list[tuple[int, str, int]] = []

    def flood():
        sock = connect(node.port)
        try:
            sent = send_until_answered(sock, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Flood: ", b"a" * 65536, HUNDRED_MIB)
            status, _, body = read_answer(sock)
            answers.append((status, detail(body), sent))
        finally:
            sock.close()

    threads = [threading.Thread(target=flood) for _ in range(15)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(answers) == 15
    for status, why, sent in answers:
        assert status == 431, why
        assert f"at most {MAX_HEAD_BYTES} bytes" in why
        assert sent < HUNDRED_MIB  # the node stopped reading long before the header ended
    still_ready(node)
    no_traceback(node)


def test_a_head_that_never_finishes_is_answered_408_once_its_time_is_up(node):
    sock = connect(node.port, timeout=HEAD_SECONDS * 3)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # ...and nothing more
        status, _, body = read_answer(sock, timeout=HEAD_SECONDS * 3)
        assert status == 408
        assert f"not complete within {HEAD_SECONDS:g} s" in detail(body)
        assert closed(sock, 5)
    finally:
        sock.close()
    still_ready(node)


def test_a_connection_that_sends_nothing_is_closed_once_its_head_is_late(node):
    sock = connect(node.port, timeout=HEAD_SECONDS * 3)
    try:
        status, _, _ = read_answer(sock, timeout=HEAD_SECONDS * 3)
        assert status == 408
    finally:
        sock.close()


def test_a_body_that_stops_arriving_gives_its_connection_back(node):
    sock = connect(node.port, timeout=BODY_IDLE_SECONDS * 3)
    try:
        sock.sendall(b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"half\": ")
        assert closed(sock, BODY_IDLE_SECONDS * 3)
    finally:
        sock.close()
    still_ready(node)


def test_past_the_connection_limit_a_new_connection_is_refused_503_at_once(node):
    limit = connection_limit(MAX_CONNECTIONS)
    held: list[socket.socket] = []
    try:
        # The node's own probes hold none of these; hold the limit's worth open, then one more.
        for _ in range(limit):
            held.append(connect(node.port, timeout=HEAD_SECONDS))
        extra = connect(node.port, timeout=HEAD_SECONDS)
        held.append(extra)
        status, headers, body = read_answer(extra, timeout=HEAD_SECONDS - 1)
        assert status == 503
        assert f"maximum of {limit} open connections" in detail(body)
        assert headers.get("retry-after")
    finally:
        for sock in held:
            sock.close()
    still_ready(node)
    no_traceback(node)
