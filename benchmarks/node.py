"""Node start-up, size and revision apply, beside baselines measured in the same run.

Prints:
- process start to /health 200 and to /ready 200 on a fresh store (target under 5 s with the
  embedded broker), beside a bare nats-server's time to accept a connection and a bare
  `manage.py check` (Django's own import and set-up);
- process start to /ready 200 with the shared records on the broker's durable KV (the
  product), beside the same node keeping them in the in-process twin as it did before
  (benchmarks/twin_records_node.py): a fresh store, and a restart on the store the first
  boot left (where the durable buckets already exist);
- the time to ensure 1,000 seat mailboxes (a company of 1,000 agent seats, applied at boot);
- the resident memory of an idle node holding 100 agent seats, the broker child included
  (target under 250 MB), beside a bare nats-server and a bare Django process;
- the time from `PUT /config` to the revision applied on the node.

Run: .venv/bin/python benchmarks/node.py
"""
from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.queue.broker import nats_server_binary  # noqa: E402
from tests.node.harness import NodeProcess, eventually  # noqa: E402

RUNS = 3
RECORDS_RUNS = 5  # boot-to-ready of the two record stores is a small difference in a noisy figure


def company(seats: int) -> str:
    lines = ["name: bench", "providers: {llm: [{name: s, kind: scripted, delay_seconds: 0, reply: ok}]}", "org:", "  seats:",
             "    - {handle: boss, kind: human, role: founder}"]
    lines += [f"    - {{handle: a{i:04d}, kind: agent, role: engineer}}" for i in range(seats)]
    return "\n".join(lines) + "\n"


def rss_mb(pid: int) -> float:
    """Resident memory of a process and its children, in MB."""
    total = 0
    pids = [pid] + [int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()]
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def boot_once(home: Path, seats: int, program: str = "manage.py") -> tuple[float, float, NodeProcess]:
    node = NodeProcess(home=home, program=program)
    began = time.monotonic()
    node.start(company=company(seats), sweep=0.5)
    health = eventually(lambda: (node.probe("/health") or (0,))[0] == 200 and time.monotonic(), 120, "/health 200", node, 0.01)
    ready = eventually(lambda: (node.probe("/ready") or (0,))[0] == 200 and time.monotonic(), 300, "/ready 200", node, 0.01)
    return health - began, ready - began, node


def broker_to_serving(node: NodeProcess, last: bool = False) -> float:
    """From the embedded broker ready to the node serving, by the node's own log: the part of
    the boot the coordination stores are in (open, provision, read and write the pointer,
    apply, take the presence lease), without the process start's noise."""
    from datetime import datetime

    marks: dict[str, list[str]] = {}
    for line in node.log_lines():
        if line.get("msg") in ("embedded_broker_ready", "node_serving"):
            marks.setdefault(line["msg"], []).append(line["time"])
    pick = (lambda xs: xs[-1]) if last else (lambda xs: xs[0])
    at = {k: datetime.fromisoformat(pick(v).replace("Z", "+00:00")) for k, v in marks.items()}
    return (at["node_serving"] - at["embedded_broker_ready"]).total_seconds()


def bare_nats(home: Path) -> tuple[float, float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home.mkdir(parents=True, exist_ok=True)
    conf = home / "bare.conf"
    conf.write_text(f'listen: "127.0.0.1:{port}"\njetstream {{ store_dir: "{home / "bare"}" }}\n')
    began = time.monotonic()
    proc = subprocess.Popen([nats_server_binary(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def up() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    eventually(up, 30, "bare nats-server", None, 0.005)
    took = time.monotonic() - began
    time.sleep(1)
    memory = rss_mb(proc.pid)
    proc.terminate()
    proc.wait()
    return took, memory


def bare_django() -> tuple[float, float]:
    began = time.monotonic()
    subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, env={**os.environ, "CREWLET_CONFIG": ""})
    took = time.monotonic() - began
    proc = subprocess.Popen([sys.executable, "-c", "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='crewlet_site.settings'; "
                             "django.setup(); import crewlet_site.asgi, time; time.sleep(30)"], cwd=ROOT, env={**os.environ, "CREWLET_CONFIG": ""})
    time.sleep(6)
    memory = rss_mb(proc.pid)
    proc.kill()
    proc.wait()
    return took, memory


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="crewlet-bench-node-") as tmp:
        tmp_path = Path(tmp)
        health, ready, nats_times, django_times = [], [], [], []
        for i in range(RUNS):
            h, r, node = boot_once(tmp_path / f"boot{i}", 3)
            health.append(h)
            ready.append(r)
            node.stop()
            n, nats_mem = bare_nats(tmp_path / f"nats{i}")
            nats_times.append(n)
            d, django_mem = bare_django()
            django_times.append(d)

        # Durable records (the product) beside the in-process twin (before), alternating, on a
        # fresh store and again on the store each left behind (a restart).
        twin = str(ROOT / "benchmarks" / "twin_records_node.py")
        durable_fresh, durable_again, twin_fresh, twin_again = [], [], [], []
        durable_phase, twin_phase = [], []
        for i in range(RECORDS_RUNS):
            for program, fresh, again, phase in (("manage.py", durable_fresh, durable_again, durable_phase),
                                                 (twin, twin_fresh, twin_again, twin_phase)):
                home = tmp_path / f"records-{Path(program).stem}-{i}"
                _, r, node = boot_once(home, 3, program)
                fresh.append(r)
                phase.append(broker_to_serving(node))
                node.stop()
                _, r, node = boot_once(home, 3, program)
                again.append(r)
                phase.append(broker_to_serving(node, last=True))
                node.stop()

        # 1,000 mailboxes: a company of 1,000 agent seats, applied at boot; the node logs the apply.
        _, ready_big, node = boot_once(tmp_path / "big", 1000)
        node.stop()
        status, body = None, None
        events = [line for line in node.log_lines() if line.get("msg") == "mailboxes_ensured"]
        mailboxes_ms = events[-1]["duration_ms"] if events else None

        # Idle memory with 100 agent seats held.
        _, _, node = boot_once(tmp_path / "idle", 100)
        eventually(lambda: len((node.probe("/health") or (0, {}))[1].get("seats", [])) == 100, 120, "100 seats held", node)
        time.sleep(5)
        idle_mb = rss_mb(node.proc.pid)

        # A revision import applied on the node.
        from tests.node.harness import ADMIN  # noqa: F401

        applies = []
        for k in range(5):
            before = node.probe("/health")[1]["revision"]
            began = time.monotonic()
            status, body, _ = node.put("/config", (company(100) + f"    - {{handle: extra{k}, kind: agent, role: engineer}}\n").encode())
            assert status == 200, body
            eventually(lambda before=before: node.probe("/health")[1]["revision"] == before + 1, 60, "the revision to apply",
                       node, 0.005)
            applies.append(time.monotonic() - began)
        node.stop()

    med = statistics.median
    print(f"benchmarks/node.py (median of {RUNS} boots on a fresh store)")
    print(f"  process start -> /health 200        {med(health):6.2f} s   (target < 5 s)")
    print(f"  process start -> /ready 200         {med(ready):6.2f} s   (target < 5 s)")
    print(f"    baseline: bare nats-server up     {med(nats_times):6.2f} s")
    print(f"    baseline: bare `manage.py check`  {med(django_times):6.2f} s")
    print(f"  start -> /ready, records on the KV  {med(durable_fresh):6.2f} s fresh, {med(durable_again):6.2f} s restart"
          f"   (median of {RECORDS_RUNS} each)")
    print(f"    baseline: records in-process      {med(twin_fresh):6.2f} s fresh, {med(twin_again):6.2f} s restart")
    print(f"  broker ready -> serving, on the KV  {med(durable_phase) * 1000:6.0f} ms  (fresh and restart boots, by the node's log)")
    print(f"    baseline: records in-process      {med(twin_phase) * 1000:6.0f} ms")
    print(f"  1,000-seat company: start -> ready  {ready_big:6.2f} s")
    mailboxes_s = mailboxes_ms / 1000 if mailboxes_ms is not None else float("nan")
    print(f"  ensure 1,000 seat mailboxes         {mailboxes_s:6.2f} s   (2,000 subscriptions: inbox + control)")
    print(f"  idle node, 100 agent seats, RSS     {idle_mb:6.1f} MB  (node + broker child; target < 250 MB)")
    print(f"    baseline: bare nats-server RSS    {nats_mem:6.1f} MB")
    print(f"    baseline: bare Django ASGI RSS    {django_mem:6.1f} MB")
    print(f"  PUT /config -> applied on the node  {med(applies) * 1000:6.0f} ms  (median of {len(applies)})")


if __name__ == "__main__":
    main()
