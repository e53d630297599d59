"""Raw HTTP on a socket, for attacks a well-behaved client library will not make."""
from __future__ import annotations

import json
import socket
import time


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def read_answer(sock: socket.socket, timeout: float = 30.0) -> tuple[int, dict, bytes]:
    """(status, headers, body) of the one answer on `sock`; (0, {}, b"") when it closed without one."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            return 0, {}, b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0") or 0)
    while len(body) < length:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            break
        if not chunk:
            break
        body += chunk
    return status, headers, body


def detail(body: bytes) -> str:
    try:
        return json.loads(body).get("detail", "")
    except ValueError:
        return body.decode("utf-8", "replace")


def send_until_answered(sock: socket.socket, head: bytes, filler: bytes, total: int) -> int:
    """Send `head`, then `filler` repeatedly up to `total` bytes or until the server stops
    reading (it answered and closed); the bytes sent."""
    sock.sendall(head)
    sent = len(head)
    sock.settimeout(5.0)
    while sent < total:
        try:
            sock.sendall(filler)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            break
        sent += len(filler)
    return sent


def closed(sock: socket.socket, timeout: float = 30.0) -> bool:
    """Whether the server closed `sock` (EOF or reset) within `timeout`."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False
