"""Real node processes for tests: `python manage.py crewlet_node` with a config written to a
temporary directory, a port on 127.0.0.1 held for it from the moment it is chosen until the
node object goes (tests/ports.py: no other process can take it between the choice and the
node's bind, nor while the node restarts), and helpers to read its probes and its log."""
from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from email.message import Message
from dataclasses import dataclass, field
from pathlib import Path

from tests.ports import PortHold

ROOT = Path(__file__).resolve().parents[2]
KEY = "bm9kZS10ZXN0LWtleS1tYXRlcmlhbC0wMTIzNDU2Nzg5YWI"
ADMIN = "node-admin-token-0123456789abcdef"
READER = "node-read-token-0123456789abcdef"

COMPANY = """
name: nimbus
providers:
  llm:
    - {name: local, kind: scripted, delay_seconds: 0.1, reply: "ok"}
org:
  seats:
    - {handle: maya, kind: human, role: founder}
    - {handle: alice, kind: agent, role: engineer, reports_to: maya}
    - {handle: bob, kind: agent, role: engineer, reports_to: maya}
    - {handle: carol, kind: agent, role: pm, reports_to: maya}
"""


def node_config(home: Path, node_id: str, port: int, *, stream: str | None = None, coordination: str | None = None,
                ttl: int | None = None, sweep: float | None = None, poll: float | None = None,
                admin: str = "serve") -> str:
    """A Tier A file. What is left None is left out, so the node runs the product's default: the
    lease TTL (45 s), the placement sweep and pause poll (5 s) and the revision poll (5 s). A test
    that shortens one says why beside the call. `admin` is api.auth.admin."""
    stream = stream or f'{{type: embedded, store_dir: "{home / "stream"}"}}'
    fields = [f"type: {coordination}"] if coordination else []
    fields += [f"lease_ttl_seconds: {ttl}"] if ttl else []
    coordination_block = f"coordination: {{{', '.join(fields)}}}\n" if fields else ""
    node = [f"id: {node_id}"] + ([f"sweep_seconds: {sweep}"] if sweep else []) + ([f"revision_poll_seconds: {poll}"] if poll else [])
    return f"""
node: {{{', '.join(node)}}}
stream: {stream}
store: {{path: "{home / 'company.db'}"}}
{coordination_block}secrets: {{active_key_id: k1, keys: [{{id: k1, material: "{KEY}"}}]}}
api:
  host: 127.0.0.1
  port: {port}
  external_url: "http://127.0.0.1:{port}"
  auth:
    admin: {admin}
    tokens:
      - {{id: founder, token: "{ADMIN}", grants: [admin]}}
      - {{id: viewer, token: "{READER}", grants: [read]}}
logging: {{level: debug, format: json}}
"""


@dataclass
class NodeProcess:
    home: Path
    node_id: str = "node-1"
    port: int = 0  # 0: a port this object holds for the node's api.port, for as long as it lives
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    program: str = "manage.py"  # a benchmark may start the node through a launcher of its own
    holds: list[PortHold] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not self.port:
            self.port = self.hold_port()

    def hold_port(self) -> int:
        """A port held for this node (see tests/ports.py) until the object goes."""
        hold = PortHold()
        self.holds.append(hold)
        return hold.port

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write(self, **config) -> Path:
        self.home.mkdir(parents=True, exist_ok=True)
        path = self.home / "crewlet.yaml"
        path.write_text(node_config(self.home, self.node_id, self.port, **config))
        return path

    def start(self, *args: str, company: str | None = COMPANY, env: dict | None = None, **config) -> "NodeProcess":
        config_path = self.write(**config)
        argv = [sys.executable, self.program, "crewlet_node", "--config", str(config_path), *args]
        if company is not None:
            company_path = self.home / "company.yaml"
            company_path.write_text(company)
            argv += ["--company", str(company_path)]
        self.log_path = self.home / "node.log"
        full_env = {**clean_env(), **(env or {})}
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=full_env, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT)
        return self

    def get(self, path: str, token: str | None = None, timeout: float = 5.0) -> tuple[int, dict | None, Message]:
        request = urllib.request.Request(self.base + path)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        return self._send(request, timeout)

    def put(self, path: str, body: bytes, token: str | None = ADMIN) -> tuple[int, dict | None, Message]:
        request = urllib.request.Request(self.base + path, data=body, method="PUT")
        request.add_header("Content-Type", "application/yaml")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        return self._send(request, 10.0)

    def post(self, path: str, body: dict, token: str | None = ADMIN) -> tuple[int, dict | None, Message]:
        request = urllib.request.Request(self.base + path, data=json.dumps(body).encode(), method="POST")
        request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        return self._send(request, 10.0)

    def _send(self, request, timeout: float):
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, _json(response.read()), response.headers  # case-insensitive, as HTTP names are
        except urllib.error.HTTPError as err:
            return err.code, _json(err.read()), err.headers

    def probe(self, path: str) -> tuple[int, dict | None] | None:
        """A probe's status and body, or None while nothing answers."""
        try:
            status, body, _ = self.get(path, timeout=2.0)
            return status, body
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, http.client.HTTPException):
            return None  # nothing answered, or the answer was cut off (a node killed mid-reply)

    def wait_ready(self, timeout: float = 60.0) -> dict:
        """/health's body once /ready is 200 (both asked again while a loaded host is slow to answer)."""
        def ready():
            answer = self.probe("/ready")
            if answer is None or answer[0] != 200:
                return None
            health = self.probe("/health")
            return health[1] if health is not None and health[1] else None

        return eventually(ready, timeout, f"{self.node_id} to be ready", self)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait_exit(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def log_lines(self) -> list[dict]:
        out = []
        for line in (self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else "").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def broker_pids(self) -> list[int]:
        """nats-server processes whose parent is this node."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid), "nats-server"], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def clean_env() -> dict:
    """The environment a node process gets: the suite's own settings module and config left out."""
    return {k: v for k, v in os.environ.items() if k not in ("CREWLET_CONFIG", "DJANGO_SETTINGS_MODULE", "CREWLET_TEST_DB")}


def _json(raw: bytes):
    try:
        return json.loads(raw)
    except ValueError:
        return None


def eventually(predicate, timeout: float, what: str, node: NodeProcess | None = None, interval: float = 0.05):
    """Poll `predicate` until it holds; fail naming `what` (and the node's log tail) at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if node is not None and node.proc is not None and node.proc.poll() is not None:
            raise AssertionError(f"{node.node_id} exited {node.proc.returncode} waiting for {what}:\n{node.log_text()[-4000:]}")
        time.sleep(interval)
    tail = node.log_text()[-4000:] if node is not None else ""
    raise AssertionError(f"timed out waiting for {what}\n{tail}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        return state != "Z"
    except OSError:
        return False
