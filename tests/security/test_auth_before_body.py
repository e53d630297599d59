"""Finding 5: non-webhook routes read the whole body before checking the token (a 1 GiB upload
to POST /seats/alice/tasks became a 1 GiB temporary file, then a 401). engine.node.gate answers
first: no token, 401 with the body unread; a body past the route's cap, 413."""
from __future__ import annotations

import pytest

from engine.node.gate import API_BODY_CAP
from tests.node.harness import ADMIN, READER
from tests.security.conftest import no_traceback, still_ready
from tests.security.wire import closed, connect, detail, read_answer, send_until_answered

pytestmark = pytest.mark.timeout(120)

GIB = 1024 ** 3


def _upload(node, path: str, token: str | None, method: str = "POST") -> tuple[int, str, int]:
    auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {GIB}\r\n").encode() + auth + b"\r\n"
    sock = connect(node.port)
    try:
        sent = send_until_answered(sock, head, b"x" * 65536, GIB)
        status, _, body = read_answer(sock)
        assert closed(sock, 10)
        return status, detail(body), sent
    finally:
        sock.close()


def test_a_gibibyte_upload_without_a_token_is_refused_401_before_its_body_is_read(node):
    status, why, sent = _upload(node, "/seats/alice/tasks", token=None)
    assert status == 401
    assert why.startswith("Authorization:")
    assert sent < GIB // 4  # the node answered and closed long before the upload ended
    still_ready(node)


def test_an_unknown_token_is_refused_the_same_way(node):
    status, why, _ = _upload(node, "/seats/alice/tasks", token="not-a-token-of-this-node")
    assert status == 401 and why.startswith("Authorization:")


def test_a_known_token_past_the_routes_cap_is_refused_413_by_its_length(node):
    status, why, sent = _upload(node, "/seats/alice/tasks", token=READER)
    assert status == 413
    assert f"at most {API_BODY_CAP} bytes" in why
    assert sent < GIB // 4
    still_ready(node)


def test_a_chunked_body_past_the_cap_is_refused_413_as_it_is_counted(node):
    sock = connect(node.port)
    try:
        head = (f"POST /seats/alice/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n"
                "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
        chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
        send_until_answered(sock, head, chunk, 64 * 1024 * 1024)
        status, _, body = read_answer(sock)
        assert status == 413 and f"at most {API_BODY_CAP} bytes" in detail(body)
    finally:
        sock.close()
    still_ready(node)
    no_traceback(node)


def test_a_body_within_the_cap_still_reaches_the_route(node):
    status, body, _ = node.get("/seats/alice", token=READER)
    assert status == 200, body
    import json
    import urllib.request

    request = urllib.request.Request(node.base + "/seats/alice/tasks", data=json.dumps({"text": "hello"}).encode(),
                                     method="POST", headers={"Authorization": f"Bearer {ADMIN}",
                                                             "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 202
