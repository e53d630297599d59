"""The README is true as written: on a fresh copy of the project, `make run PORT=<port>` starts a
node that prints exactly the banner the README shows, and every fenced shell block the README
marks ```sh runnable works, typed in order into one terminal, as the README says to type them
(the port exported as CREWLET_PORT, as it says to after `make run PORT=...`).

The copy is the project's files (tracked, and new ones not ignored) in a temporary directory,
with a `.venv` whose folders are the checkout's own (linked, so nothing is installed again);
`var/` is its own, so the node, its keyring and its store are made fresh by `make run`, as on
a clone. Every wait has a deadline; nothing asserts a duration.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.node.harness import ROOT, clean_env, eventually
from tests.ports import PortHold

pytestmark = pytest.mark.timeout(300)

FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)
BANNER_END = "Stop it with Ctrl-C"


def blocks(text: str) -> list[tuple[str, set[str], str]]:
    """Every fenced block: (language, its markers, its text)."""
    return [(lang, set(info.split()), body) for lang, info, body in FENCE.findall(text)]


def project_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode()
    return [p for p in listed.split("\0") if p and (ROOT / p).is_file()]


def fresh_copy(into: Path) -> Path:
    """The project as a clone has it, with the checkout's installed .venv linked in."""
    for name in project_files():
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)  # the times too: pyproject.toml stays older than the install
    venv = into / ".venv"
    venv.mkdir()
    for part in (ROOT / ".venv").iterdir():
        if part.name != ".installed":
            (venv / part.name).symlink_to(part)
    (venv / ".installed").touch()  # this copy's own stamp: `make` installs nothing
    return into


def env_for(port: int) -> dict:
    env = {k: v for k, v in clean_env().items() if not k.startswith(("CREWLET_", "DJANGO_", "GITHUB_", "SLACK_"))}
    return {**env, "CREWLET_PORT": str(port)}


@pytest.fixture
def running(tmp_path):
    """`make run PORT=<port>` in a fresh copy, started as a terminal starts it (its own process
    group, so a Ctrl-C reaches make and the node alike); (copy, port, output file, process)."""
    copy = fresh_copy(tmp_path / "crewlet")
    hold = PortHold()  # kept from every other process until the node binds it
    port = hold.port
    out = tmp_path / "make-run.log"
    env = env_for(port)
    env.pop("CREWLET_PORT")  # `make run PORT=...` alone names the port
    proc = subprocess.Popen(["make", "run", f"PORT={port}"], cwd=copy, env=env, stdout=open(out, "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        eventually(lambda: BANNER_END in out.read_text(errors="replace") or proc.poll() is not None, 120,
                   "make run to print its banner")
        assert proc.poll() is None, out.read_text()
        yield copy, port, out, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def ready(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def test_every_command_in_the_readme_works_as_written_on_a_fresh_copy(running):
    copy, port, out, proc = running
    readme = (copy / "README.md").read_text()
    fenced = blocks(readme)
    shell = [(markers, body) for lang, markers, body in fenced if lang == "sh"]
    assert all({"runnable"} & markers or {"quickstart"} & markers for markers, _ in shell), \
        "every sh block is marked runnable (the quick start is run by this test itself)"
    assert "make run PORT=8123" in readme and "CREWLET_PORT" in readme

    # The banner the README shows is the one the node prints (on the port it was given).
    (banner,) = [body for lang, markers, body in fenced if lang == "text" and "banner" in markers]
    printed = out.read_text(errors="replace")
    start = printed.index("Crewlet node ")
    shown = printed[start:printed.index(BANNER_END, start)] + printed[printed.index(BANNER_END, start):].split("\n", 1)[0]
    assert shown.rstrip() == banner.replace("127.0.0.1:8000", f"127.0.0.1:{port}").rstrip()
    eventually(lambda: ready(port), 60, "the node to be ready")

    # Every runnable block, in order, typed into one terminal.
    runnable = [body for markers, body in shell if "runnable" in markers]
    script = "set -euo pipefail\n" + "".join(f"{body}\necho '### block {i} worked'\n" for i, body in enumerate(runnable))
    typed = subprocess.run(["bash", "-c", script], cwd=copy, env=env_for(port), capture_output=True, text=True, timeout=180)
    said = typed.stdout + typed.stderr
    worked = said.count("### block ")
    assert typed.returncode == 0, f"block {worked} failed:\n{runnable[worked] if worked < len(runnable) else ''}\n{said[-3000:]}"
    assert worked == len(runnable)
    assert '"trace_url": "http://127.0.0.1:' in said or f'"trace_url":"http://127.0.0.1:{port}' in said
    assert '"status": "accepted"' in said or '"status":"accepted"' in said  # the signed webhook
    assert "ok: examples/company.yaml: company nimbus" in said
    assert "made the operator account operator" in said

    # The task the README posts, the command-line task and the webhook each became a turn.
    import json
    import urllib.request

    token = dict(line.split("=", 1) for line in (copy / "var" / "dev.env").read_text().splitlines()
                 if "=" in line and not line.startswith("#"))["CREWLET_API_TOKEN_FOUNDER"]

    def turns():
        request = urllib.request.Request(f"http://127.0.0.1:{port}/events?type=agent_turn_completed&limit=50",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=5) as answer:
            items = json.loads(answer.read())["items"]
        return {item["agent_handle"] for item in items} >= {"alice", "bob"} and len(items) >= 3

    eventually(turns, 60, "the README's tasks and webhook to become turns")
    request = urllib.request.Request(f"http://127.0.0.1:{port}/events?type=task_assigned&limit=5",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        summaries = [item["summary"] for item in json.loads(answer.read())["items"]]
    assert any(s.startswith("maya assigned alice: Write the release notes") for s in summaries), summaries  # never token:...

    # Without a terminal and without the variables, `make superuser` says how, and fails.
    bare = subprocess.run(["make", "superuser"], cwd=copy, env=env_for(port), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert bare.returncode != 0 and "DJANGO_SUPERUSER_USERNAME=" in bare.stderr

    # Ctrl-C: the node says what it waits for, drains, and make returns.
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(60)
    assert "crewlet: stopping" in out.read_text(errors="replace")


def test_a_taken_port_is_refused_saying_how_to_pick_another(tmp_path):
    copy = fresh_copy(tmp_path / "crewlet")
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        env = env_for(port)
        env.pop("CREWLET_PORT")
        run = subprocess.run(["make", "run", f"PORT={port}"], cwd=copy, env=env, capture_output=True, text=True, timeout=240)
    said = run.stdout + run.stderr
    assert run.returncode != 0
    assert f"api.port: 127.0.0.1:{port} is already in use" in said
    assert "make run PORT=8123" in said and "--api-port" in said
