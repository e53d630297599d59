"""Webhook edge figures on a real node, printed (not a test).

    .venv/bin/python benchmarks/webhooks.py [--quick]

One node process (embedded broker, `stream.sync: always` -- a solo node refuses a sync window --, roles
data,ingress,workers so no turn competes with the edge -- every agent's mailbox exists all the
same) and load from separate client processes on loopback, in one run:
  (a) the most accepted requests per second a closed loop of 32 in-flight requests gets from
      `POST /webhooks/github` (every body signed with X-Hub-Signature-256, each delivery id
      new), beside `GET /health` on the same server driven the same way, and the ratio;
  (b) p50 / p99 latency at an offered 500 deliveries per second (open loop), and at 250,
      each beside /health at the same rate, each from a settled node (the routing backlog of
      what came before drained), so the figure is the steady state of edge plus routing. The
      latency is timed from when the request was due by the schedule, not from when a free
      connection got round to sending it: a stalled server delays the sends behind it, and
      timing from the send would leave that wait out (coordinated omission). The figure from
      the actual send is printed beside it;
  (c) nothing lost: every accepted delivery becomes exactly one outcome in the event store --
      a wake (external_notification) or a notification_skipped -- counted by delivery id
      (the mix: 80% address an agent, 10% a human seat, 10% a login no seat matches).
The node serves webhooks through its ASGI edge (notify.asgi.WebhookEdge) in front of Django.
Targets: 500 signed deliveries per second or more, p99 under 100 ms.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import hmac
import itertools
import json
import multiprocessing
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.node.harness import READER, NodeProcess, eventually, node_config  # noqa: E402

SECRET = "bench-github-secret-0123456789"
CLIENTS = 4          # client processes
IN_FLIGHT = 32       # closed loop: requests in flight across all clients
RATE = 500           # open loop: offered deliveries per second (the target)
LIGHT_RATE = 250     # and at half of it, where the node is not saturated
ROUTING_DEADLINE_SECONDS = 300  # how long the loss check waits for the routing backlog to drain
COMPANY = """
name: bench
providers: {llm: [{name: s, kind: scripted, delay_seconds: 0, reply: ok}]}
org:
  seats:
    - {handle: maya, kind: human, role: founder}
    - {handle: alice, kind: agent, role: engineer}
    - {handle: bob, kind: agent, role: engineer}
integrations:
  github:
    webhook_secret: "${GITHUB_WEBHOOK_SECRET}"
    users: {octo-alice: alice, octo-bob: bob, octo-maya: maya}
"""


class BenchNode(NodeProcess):
    """The harness's node at info level: a debug line per request would be the figure measured."""

    def write(self, **config):
        self.home.mkdir(parents=True, exist_ok=True)
        path = self.home / "crewlet.yaml"
        path.write_text(node_config(self.home, self.node_id, self.port, **config).replace("level: debug", "level: info"))
        return path


# -- requests ----------------------------------------------------------------------------------
_comment_ids = itertools.count(1)


def signed_delivery(i: int, port: int) -> tuple[bytes, str]:
    """One signed GitHub comment as raw HTTP/1.1 bytes, and its delivery id. Every comment has an
    id of its own, as on GitHub: a wake is deduplicated on the comment it carries."""
    who = "@octo-maya" if i % 10 == 8 else "@stranger" if i % 10 == 9 else "@octo-alice" if i % 2 else "@octo-bob"
    body = json.dumps({
        "action": "created", "repository": {"full_name": "bench/api"}, "sender": {"login": "octo-someone"},
        "issue": {"number": i % 50, "title": "bench", "user": {"login": "external"}, "pull_request": {}},
        "comment": {"id": next(_comment_ids), "body": f"{who} please look at {i}", "user": {"login": "octo-someone"}},
    }).encode()
    delivery = str(uuid.uuid4())
    mac = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    head = (f"POST /webhooks/github HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"X-GitHub-Event: issue_comment\r\nX-GitHub-Delivery: {delivery}\r\nX-Hub-Signature-256: sha256={mac}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body, delivery


def health_request(port: int) -> bytes:
    return f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


async def _exchange(reader, writer, request: bytes) -> tuple[int, bytes]:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return status, await reader.readexactly(length)


class Sample(NamedTuple):
    sent: float        # seconds from the start of the run
    latency: float     # the answer's arrival less when the request was due (the send, in a closed loop)
    from_send: float   # the answer's arrival less the actual send
    status: int


class Load(NamedTuple):
    rate: float                # answers per second over the run
    latencies: list[float]     # from the schedule
    from_send: list[float]     # from the actual send
    statuses: list[int]


async def _drive(port: int, requests: list[bytes], in_flight: int, rate: float | None) -> list[Sample]:
    """One sample per request: a closed loop of `in_flight` connections, or an open loop where
    request i is due at i / `rate` seconds (each connection takes the next request and sends it
    when due, or at once if it is already late)."""
    out: list[Sample] = []
    todo = iter(enumerate(requests))
    began = time.perf_counter()

    async def connection():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i, request in todo:
            due = began + i / rate if rate else None
            if due is not None and due > time.perf_counter():
                await asyncio.sleep(due - time.perf_counter())
            sent = time.perf_counter()
            status, _ = await _exchange(reader, writer, request)
            answered = time.perf_counter()
            out.append(Sample(sent - began, answered - (sent if due is None else due), answered - sent, status))
        writer.close()

    await asyncio.gather(*(connection() for _ in range(in_flight)))
    return out


def client(port: int, requests: list[bytes], in_flight: int, rate: float | None, conn) -> None:
    """A client process: drive its share and send the results back."""
    conn.send(asyncio.run(_drive(port, requests, in_flight, rate)))
    conn.close()


def run_load(port: int, requests: list[bytes], in_flight: int, rate: float | None) -> Load:
    """The figures of CLIENTS processes sharing the load."""
    ctx = multiprocessing.get_context("fork")
    shares = [requests[k::CLIENTS] for k in range(CLIENTS)]
    pipes, procs = [], []
    for share in shares:
        mine, theirs = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=client, args=(port, share, max(1, in_flight // CLIENTS),
                                                (rate / CLIENTS) if rate else None, theirs))
        proc.start()
        pipes.append(mine)
        procs.append(proc)
    results = [p.recv() for p in pipes]
    for proc in procs:
        proc.join()
    samples = [s for r in results for s in r]
    span = max(s.sent + s.from_send for s in samples) - min(s.sent for s in samples)
    return Load(len(samples) / span, [s.latency for s in samples], [s.from_send for s in samples], [s.status for s in samples])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


# -- the loss check ------------------------------------------------------------------------------
def settle(node: NodeProcess, accepted: set[str]) -> dict[str, int]:
    """Wait (up to ROUTING_DEADLINE_SECONDS) until every accepted delivery has an outcome; the
    counts either way."""
    counts: dict[str, int] = {}

    def settled() -> bool:
        counts.update(outcomes(node, accepted))
        return all(counts.values())

    try:
        eventually(settled, ROUTING_DEADLINE_SECONDS, "every accepted delivery to have an outcome", node, interval=1.0)
    except AssertionError:
        pass  # reported as deliveries without an outcome
    return counts


def outcomes(node: NodeProcess, accepted: set[str]) -> dict[str, int]:
    """How many outcomes each accepted delivery has in the event store."""
    counts = dict.fromkeys(accepted, 0)
    for kind in ("external_notification", "notification_skipped"):
        cursor = None
        while True:
            query = f"/events?type={kind}&limit=500" + (f"&cursor={cursor}" if cursor else "")
            status, body, _ = node.get(query, token=READER, timeout=30)
            assert status == 200, body
            for row in body["items"]:
                if row.get("delivery_id") in counts:
                    counts[row["delivery_id"]] += 1
            cursor = body.get("next_cursor")
            if not cursor:
                break
    return counts


def measure(total: int, seconds: int) -> dict:
    """One node, one set of figures (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="crewlet-bench-webhooks-") as tmp:
        node = BenchNode(home=Path(tmp) / "node-1")
        node.start("--roles", "data,ingress,workers", company=COMPANY, env={"GITHUB_WEBHOOK_SECRET": SECRET})
        try:
            node.wait_ready()
            port = node.port
            accepted: set[str] = set()

            def deliveries(n: int) -> tuple[list[bytes], list[str]]:
                pairs = [signed_delivery(i, port) for i in range(n)]
                accepted.update(p[1] for p in pairs)
                return [p[0] for p in pairs], [p[1] for p in pairs]

            run_load(port, deliveries(500)[0], IN_FLIGHT, None)  # warm-up
            run_load(port, [health_request(port)] * 500, IN_FLIGHT, None)
            # (a) closed loop, alternating rounds, best of each: the host's drift lands on both sides.
            hook_rps, health_rps = [], []
            for _ in range(2):
                hook = run_load(port, deliveries(total)[0], IN_FLIGHT, None)
                assert set(hook.statuses) == {202}, f"unexpected statuses {set(hook.statuses)}"
                hook_rps.append(hook.rate)
                health = run_load(port, [health_request(port)] * total, IN_FLIGHT, None)
                assert set(health.statuses) == {200}
                health_rps.append(health.rate)
            # (b) open loop at RATE per second, then at LIGHT_RATE, each from a settled node: the
            # closed loop's routing backlog is drained first, so the figure is the steady state
            # (the edge and the routing of what it accepts, sharing the node).
            open_loop = {}
            for rate in (RATE, LIGHT_RATE):
                settle(node, accepted)
                hook = run_load(port, deliveries(rate * seconds)[0], IN_FLIGHT, rate)
                assert set(hook.statuses) == {202}, f"unexpected statuses {set(hook.statuses)}"
                health = run_load(port, [health_request(port)] * (rate * seconds), IN_FLIGHT, rate)
                open_loop[rate] = (hook, health)
            # (c) nothing lost.
            last_accept = time.monotonic()
            counts = settle(node, accepted)
            missing = sum(1 for c in counts.values() if c == 0)
            warnings = collections.Counter(line.get("msg") for line in node.log_lines() if line.get("level") in ("WARN", "ERROR"))
            return {"warnings": dict(warnings), "hook_rps": hook_rps, "health_rps": health_rps, "open_loop": open_loop,
                    "accepted": len(accepted), "missing": missing, "doubled": sum(1 for c in counts.values() if c > 1),
                    "routed_after": time.monotonic() - last_accept}
        finally:
            node.stop()


def report(title: str, f: dict, total: int, seconds: int) -> None:
    best_hook, best_health = max(f["hook_rps"]), max(f["health_rps"])
    p99_hook = pct(f["open_loop"][RATE][0].latencies, 0.99)
    print(title)
    print(f"  closed loop, {IN_FLIGHT} in flight from {CLIENTS} client processes, {total} requests a round (best of 2):")
    print(f"    POST /webhooks/github (signed)  {best_hook:7.0f} accepted/s  (rounds {', '.join(f'{r:.0f}' for r in f['hook_rps'])})")
    print(f"    GET  /health                    {best_health:7.0f} req/s       (rounds {', '.join(f'{r:.0f}' for r in f['health_rps'])})")
    print(f"    ratio webhook / health          {best_hook / best_health:7.2f}")
    for rate, loads in f["open_loop"].items():
        print(f"  open loop, offered {rate}/s for {seconds} s (latency from the scheduled send; from the actual send in brackets):")
        for name, load in zip(("POST /webhooks/github", "GET  /health         "), loads, strict=True):
            print(f"    {name}  achieved {load.rate:5.0f}/s  p50 {pct(load.latencies, 0.5):6.1f} ms  p99 {pct(load.latencies, 0.99):6.1f} ms"
                  f"  (p50 {pct(load.from_send, 0.5):.1f} ms, p99 {pct(load.from_send, 0.99):.1f} ms)")
    print(f"  nothing lost: {f['accepted']} accepted, {f['missing']} without an outcome, {f['doubled']} with two or more "
          f"(the last routed {f['routed_after']:.1f} s after the last accept)")
    if f["warnings"]:
        print(f"  the node's warnings: {f['warnings']}")
    print(f"  targets: >= 500 accepted/s {'met' if best_hook >= 500 else 'MISSED'}; p99 < 100 ms at {RATE}/s "
          f"{'met' if p99_hook < 100 else 'MISSED'}; lost {'none' if f['missing'] == 0 else f['missing']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer requests, for a smoke run")
    args = parser.parse_args()
    total, seconds = (1500, 4) if args.quick else (5000, 8)
    report("Through the ASGI webhook edge:", measure(total, seconds), total, seconds)


if __name__ == "__main__":
    main()
