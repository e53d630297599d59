"""Three nodes that share one stream, as processes (seed 002, "Every node embeds a member of
one cluster", "An external NATS server", "Running a Fleet"): each node embeds a member of
a three-member cluster routed on 127.0.0.1, or all three dial an external three-server
cluster. Kept apart from tests/node/harness.py (a helper of its own, built on its NodeProcess)."""
from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.fleet.servers import Cluster
from tests.node.harness import NodeProcess, eventually
from tests.ports import PortHold

TTL = 4  # seconds: a node that stops renewing hands its seats on this quickly (the default, 45, has its own test)


class Fleet:
    """Three (or `size`) node processes on one stream, each with its own store and port."""

    kind = "fleet"

    def __init__(self, home: Path, size: int = 3, *, ttl: int | None = TTL, sweep: float = 0.3) -> None:
        self.home = home
        self.nodes = [NodeProcess(home=home / f"node-{i + 1}", node_id=f"node-{i + 1}") for i in range(size)]
        self.ttl = ttl
        self.sweep = sweep

    def stream_block(self, index: int) -> str:
        raise NotImplementedError

    def config(self, index: int) -> dict:
        return {"stream": self.stream_block(index), "coordination": "embedded-kv", "ttl": self.ttl, "sweep": self.sweep}

    def start_node(self, index: int, *args: str, company: str | None = None, env: dict | None = None) -> NodeProcess:
        return self.nodes[index].start(*args, company=company, env=env, **self.config(index))

    def start(self, company: str, *, env: dict | None = None, stagger: float = 0.0) -> "Fleet":
        """Every node, the first with the company file (the rest learn it from the fleet's
        pointer); `stagger` seconds apart (0: together)."""
        for i in range(len(self.nodes)):
            if i and stagger:
                time.sleep(stagger)
            self.start_node(i, company=company if i == 0 else None, env=env)
        return self

    def wait_ready(self, timeout: float = 180.0) -> list[dict]:
        return [node.wait_ready(timeout) for node in self.nodes]

    def seats(self, node: NodeProcess) -> set[str]:
        answer = node.probe("/health")
        return set(answer[1].get("seats", ())) if answer and answer[1] and node.proc.poll() is None else set()

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.send_signal(signal.SIGCONT)  # a stopped process cannot hear SIGTERM
        for node in self.nodes:
            node.stop()


class EmbeddedFleet(Fleet):
    """Every node embeds a member of one three-member cluster, routed on 127.0.0.1."""

    kind = "embedded"

    def __init__(self, home: Path, size: int = 3, **kwargs) -> None:
        super().__init__(home, size, **kwargs)
        self.route_holds = [PortHold() for _ in self.nodes]  # each member's route port, kept for it across restarts
        self.routes = [hold.port for hold in self.route_holds]

    def stream_block(self, index: int) -> str:
        peers = ", ".join(f'"nats://127.0.0.1:{p}"' for j, p in enumerate(self.routes) if j != index)
        store = self.nodes[index].home / "stream"
        return (f'{{type: embedded, store_dir: "{store}", replicas: 3, '
                f'cluster: {{name: crewlet, host: 127.0.0.1, port: {self.routes[index]}, peers: [{peers}]}}}}')

    def broker_pid(self, index: int) -> int:
        pids = eventually(lambda: self.nodes[index].broker_pids(), 10, f"node-{index + 1}'s embedded member")
        return pids[0]


class ExternalFleet(Fleet):
    """Every node dials an external three-server cluster through its URL list."""

    kind = "external"

    def __init__(self, home: Path, size: int = 3, **kwargs) -> None:
        super().__init__(home, size, **kwargs)
        self.cluster = Cluster(home / "nats")

    def start(self, company: str, **kwargs) -> "ExternalFleet":
        self.cluster.start()
        return super().start(company, **kwargs)

    def stream_block(self, index: int) -> str:
        # Each node lists the servers starting from a different one, as an operator spreading load would.
        urls = self.cluster.url.split(",")
        ordered = urls[index % len(urls):] + urls[:index % len(urls)]
        return f'{{type: nats, url: "{",".join(ordered)}", replicas: 3}}'

    def stop(self) -> None:
        super().stop()
        self.cluster.stop()
