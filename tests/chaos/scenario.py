"""What the chaos suite drives and reads (issue 15, "Done means"; seed 002, "Replica count":
"certified by a chaos suite that kills nodes mid-turn under load").

- `Burst`: tasks posted to the seats' inboxes through every node's REST API (`POST
  /seats/{handle}/tasks`), each acknowledged with the id of the event the broker took; a node
  that does not answer is skipped for the next one, and a post that got no answer is not
  counted as acknowledged.
- `ReadyWatch`: every node's /ready sampled throughout, so the run can say what each answered.
- `StreamReader`: the events the fleet published, read back from the broker's own
  CREWLET_EVENTS stream (not from any node's store, which a SIGKILL may cut short of its last
  writes): every turn started and completed, and whatever explains a task that was not worked.
"""
from __future__ import annotations

import asyncio
import http.client
import itertools
import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from tests.fleet.fleet import ExternalFleet, Fleet
from tests.node.harness import ADMIN, NodeProcess

COMPLETED, STARTED = "agent_turn_completed", "agent_turn_started"


def company(seats: int, delay: float = 0.2) -> str:
    """A company of `seats` agent seats on the scripted provider; each turn takes `delay` seconds,
    so a fault lands while turns are running."""
    lines = [f"    - {{handle: s{i:02d}, kind: agent, role: engineer, reports_to: maya}}" for i in range(seats)]
    return (f"name: chaos\nproviders:\n  llm:\n    - {{name: local, kind: scripted, delay_seconds: {delay}, reply: \"done\"}}\n"
            "org:\n  seats:\n    - {handle: maya, kind: human, role: founder}\n" + "\n".join(lines) + "\n")


def handles(seats: int) -> list[str]:
    return [f"s{i:02d}" for i in range(seats)]


class Burst:
    """Posts tasks round-robin over the seats and the nodes, in a thread of its own."""

    def __init__(self, fleet: Fleet, seats: list[str]) -> None:
        self.fleet = fleet
        self.seats = seats
        self.acknowledged: dict[str, str] = {}   # event id -> seat
        self.unanswered = 0                      # posts that got no answer (maybe taken, never counted)
        self.refused: Counter = Counter()        # status codes of posts a node refused (503 draining, ...)
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def post(self, node: NodeProcess, seat: str, text: str) -> str | None:
        request = urllib.request.Request(f"{node.base}/seats/{seat}/tasks", data=json.dumps({"text": text}).encode(),
                                         method="POST", headers={"Authorization": f"Bearer {ADMIN}",
                                                                 "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.loads(response.read())["event_id"] if response.status == 202 else None
        except urllib.error.HTTPError as err:
            with self._lock:
                self.refused[err.code] += 1
            return None
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, http.client.HTTPException):
            with self._lock:  # no answer, or one cut off (a node killed mid-reply)
                self.unanswered += 1
            return None

    def send(self, count: int) -> None:
        """Post `count` tasks, each acknowledged by some node (a refused post is posted again elsewhere)."""
        nodes = itertools.cycle(self.fleet.nodes)
        for _ in range(count):
            n = next(self._numbers)
            seat = self.seats[n % len(self.seats)]
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                node = next(nodes)
                if node.proc is None or node.proc.poll() is not None:
                    continue
                event_id = self.post(node, seat, f"task {n}")
                if event_id:
                    with self._lock:
                        self.acknowledged[event_id] = seat
                    break
                time.sleep(0.05)  # every node refused or was silent this round: a beat before the next

    def start(self, count: int) -> "Burst":
        self.join()
        self._thread = threading.Thread(target=self.send, args=(count,), name="burst", daemon=True)
        self._thread.start()
        return self

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None


@dataclass
class Sample:
    at: float
    status: int | None    # None: nothing answered (killed, stopped, restarting)
    reason: str = ""


class ReadyWatch:
    """Samples every node's /ready every `interval` seconds until stopped."""

    def __init__(self, fleet: Fleet, interval: float = 0.5) -> None:
        self.fleet = fleet
        self.interval = interval
        self.samples: dict[str, list[Sample]] = defaultdict(list)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ready-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for node in self.fleet.nodes:
                asked = time.time()  # when the probe was sent: a slow answer was decided about then
                try:
                    answer = node.probe("/ready") if node.proc is not None and node.proc.poll() is None else None
                    body = answer[1] if answer is not None and isinstance(answer[1], dict) else {}
                    sample = Sample(asked, None) if answer is None else Sample(asked, answer[0], str(body.get("reason", "")))
                except Exception as exc:  # whatever a dying node answers, the sampling goes on
                    sample = Sample(asked, None, f"{type(exc).__name__}: {exc}")
                self.samples[node.node_id].append(sample)
            self._stop.wait(self.interval)

    def start(self) -> "ReadyWatch":
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        """Whether it is still sampling (a sampler that died would make the drain check vacuous)."""
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def between(self, node_id: str, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples[node_id] if start <= s.at <= end]


@dataclass
class Ledger:
    """What the fleet published about turns, from the broker's own event stream."""

    completed: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))  # trigger -> completions
    started: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    mentions: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))   # trigger -> event types naming it

    def worked(self, trigger: str) -> int:
        return sum(1 for c in self.completed.get(trigger, ()) if c["outcome"] == "completed")


def member_dial(node: NodeProcess) -> tuple[str, str]:
    """The client URL and token of a node's own embedded member. A test reads its own temporary
    files: the member's ports file and the per-boot token its config holds (never printed)."""
    store = node.home / "stream"
    ports = sorted(store.glob("nats-server_*.ports"), key=lambda p: p.stat().st_mtime)
    token = re.search(r'token: "([^"]+)"', (store / "nats-server.conf").read_text()).group(1)
    return json.loads(Path(ports[-1]).read_text())["nats"][0], token


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def settled(url: str, token: str | None = None) -> bool:
    """Whether every stream of the fleet's account (the event stream, the mailboxes, the
    coordination store's buckets) and every consumer on it has a leader and every replica
    caught up: a broker member lost and back is a fault over only once this holds. A node's
    /ready asks its connections (a ping), not each replicated group's election."""
    return asyncio.run(_settled(url, token))


async def _settled(url: str, token: str | None) -> bool:
    try:
        nc = await nats.connect(servers=url.split(","), token=token, connect_timeout=5, allow_reconnect=False)
    except Exception:
        return False
    try:
        js = nc.jetstream(timeout=5)
        for stream in await js.streams_info():
            if not _group_settled(stream.cluster):
                return False
            for consumer in await js.consumers_info(stream.config.name):
                if not _group_settled(consumer.cluster):
                    return False
        return True
    except Exception:
        return False
    finally:
        await nc.close()


def _group_settled(cluster) -> bool:
    if cluster is None:  # a single server: no election to wait for
        return True
    return bool(cluster.leader) and all(r.current and not r.offline for r in cluster.replicas or ())


class StreamReader:
    """Reads CREWLET_EVENTS from one live member of the fleet's stream."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def _dial(self) -> tuple[str, str | None]:
        if isinstance(self.fleet, ExternalFleet):
            return self.fleet.cluster.url, None
        for node in self.fleet.nodes:
            if node.proc is not None and node.proc.poll() is None:
                return member_dial(node)
        raise AssertionError("no member of the fleet is running to read the stream from")

    def read(self) -> Ledger:
        return asyncio.run(self._read())

    async def _read(self) -> Ledger:
        url, token = self._dial()
        nc = await nats.connect(servers=url.split(","), token=token, connect_timeout=5)
        ledger = Ledger()
        try:
            js = nc.jetstream(timeout=10)
            sub = await js.pull_subscribe("crewlet.events.>", durable=None, stream="CREWLET_EVENTS",
                                          config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE,
                                                                mem_storage=True, num_replicas=1, inactive_threshold=30))
            unavailable = 0
            while True:
                try:
                    msgs = await sub.fetch(500, timeout=2)
                except nats.errors.TimeoutError:
                    break
                except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
                    # a replicated stream's new consumer not yet placed where the pull landed
                    unavailable += 1
                    assert unavailable < 50, "the event stream did not serve a read for 10 s"
                    await asyncio.sleep(0.2)
                    continue
                for msg in msgs:
                    self._take(ledger, json.loads(msg.data))
                if msgs and msgs[-1].metadata.num_pending == 0:
                    break
            await sub.unsubscribe()
        finally:
            await nc.close()
        return ledger

    @staticmethod
    def _take(ledger: Ledger, event: dict) -> None:
        kind = event.get("type", "")
        body = {**(event.get("payload") or {}), **{k: v for k, v in event.items() if k not in ("payload", "id")}}
        triggers = body.get("trigger_ids") or ([body["trigger_id"]] if body.get("trigger_id") else [])
        record = {"node": event.get("node", ""), "outcome": body.get("outcome", ""), "turn_id": body.get("turn_id", ""),
                  "seat": body.get("agent_handle", ""), "time": event.get("timestamp", "")}
        for trigger in triggers:
            if kind == COMPLETED:
                ledger.completed[trigger].append(record)
            elif kind == STARTED:
                ledger.started[trigger].append(record)
        if kind not in (COMPLETED, STARTED):
            for trigger in set(_UUID.findall(json.dumps(body))):
                ledger.mentions[trigger].add(kind)
