"""What the node's one event loop takes from a hostile client, printed (not a test).

    .venv/bin/python benchmarks/surface.py

One node process (embedded broker, every integration connected) and clients on loopback, in
one run; every figure is the latency of `GET /ready` (or `GET /events`) beside the same probe
with nothing else running, measured in the same run:
  (a) idle: /ready with nothing else running -- the baseline;
  (b) 15 clients each sending a 100 MiB header (refused 431 at engine.node.limits.MAX_HEAD_BYTES);
  (c) MAX_CONNECTIONS idle connections held open (a slow-loris), then /ready;
  (d) 4 clients posting 8 MiB unsigned Mattermost forms in a loop (refused 401 by the token scan);
  (e) GET /events while 24 sign-ins with wrong passwords run (hashing on the sign-in threads),
      beside GET /events alone.
The limits in engine.node.limits are sized from these: a head is parsed at most once a read, idle
connections cost the loop nothing per second, and the bound keeps descriptors in hand.
"""
from __future__ import annotations

import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.node.limits import MAX_CONNECTIONS, connection_limit  # noqa: E402
from tests.node.harness import READER  # noqa: E402
from tests.notify import deliveries as d  # noqa: E402
from tests.notify.http import post  # noqa: E402
from tests.security.conftest import ProxiedNode, Session, make_user  # noqa: E402
from tests.security.wire import connect, read_answer, send_until_answered  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def latencies(node, path: str, token: str | None, until, at_least: int = 20) -> list[float]:
    """ms per GET `path`, probed back to back until `until()` and at least `at_least` times."""
    out: list[float] = []
    while len(out) < at_least or not until():
        began = time.perf_counter()
        node.get(path, token=token, timeout=30)
        out.append((time.perf_counter() - began) * 1000)
    return out


def while_running(work: list[threading.Thread]):
    for thread in work:
        thread.start()
    return lambda: not any(t.is_alive() for t in work)


def line(label: str, values: list[float], base: list[float]) -> None:
    print(f"  {label:<58} p50 {statistics.median(values):7.1f} ms  p99 {pct(values, 0.99):7.1f} ms"
          f"   (alone: p50 {statistics.median(base):5.1f} / p99 {pct(base, 0.99):5.1f} ms, n={len(values)})")


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="crewlet-surface-"))
    node = ProxiedNode(home=home / "node-1")
    node.trusted_proxies = ("127.0.0.1",)
    node.start(company=d.company_yaml(), env=d.ENV)
    try:
        node.wait_ready()
        make_user(node, "maya", "the-real-password-0123")
        print("Hostile clients against one node's loop (GET /ready latency beside the same probe alone):")
        base = latencies(node, "/ready", None, lambda: True, at_least=200)
        line("(a) nothing else running", base, base)

        def header_flood():
            sock = connect(node.port, timeout=60)
            try:
                send_until_answered(sock, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Flood: ", b"a" * 65536, 100 * 1024 * 1024)
                read_answer(sock)
            finally:
                sock.close()

        done = while_running([threading.Thread(target=header_flood) for _ in range(15)])
        line("(b) 15 clients sending 100 MiB headers (431)", latencies(node, "/ready", None, done), base)

        held: list[socket.socket] = []
        limit = connection_limit(MAX_CONNECTIONS)
        began = time.perf_counter()
        for _ in range(limit - 8):
            held.append(connect(node.port, timeout=30))
        opened = time.perf_counter() - began
        values = latencies(node, "/ready", None, lambda: True, at_least=200)
        line(f"(c) {len(held)} idle connections held open (opened in {opened:.1f} s)", values, base)
        for sock in held:
            sock.close()

        form = b"&".join(b"f%d=v" % i for i in range(1_200_000))[: 8 * 1024 * 1024 - 64]

        def unsigned_forms():
            for _ in range(10):
                post(node, "/webhooks/mattermost", form, {"Content-Type": "application/x-www-form-urlencoded"}, timeout=60)

        done = while_running([threading.Thread(target=unsigned_forms) for _ in range(4)])
        line("(d) 4 clients posting unsigned 8 MiB Mattermost forms (401)", latencies(node, "/ready", None, done), base)

        events_alone = latencies(node, "/events?limit=50", READER, lambda: True, at_least=100)
        counter = iter(range(1, 10_000))

        def wrong_sign_ins():
            for _ in range(4):
                address = f"192.0.2.{next(counter) % 250 + 1}"
                Session(node.base, {"X-Forwarded-For": address, "Origin": "https://crewlet.example",
                                    "X-Forwarded-Proto": "https", "Host": "crewlet.example"}).sign_in("maya", "wrong")

        done = while_running([threading.Thread(target=wrong_sign_ins) for _ in range(6)])
        line("(e) GET /events during 24 wrong sign-ins (6 at a time)", latencies(node, "/events?limit=50", READER, done),
             events_alone)
        answer = node.probe("/ready")
        print(f"  /ready after all of it: {answer[0] if answer else 'no answer'}")
    finally:
        node.stop()


if __name__ == "__main__":
    main()
