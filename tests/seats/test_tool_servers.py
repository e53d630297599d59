"""The company's MCP tool servers (DESIGN.md, deliberate difference 4; seed 002, "While a node is
starting": each bounded by its own startup_timeout_seconds, for its start and again for its
first tool listing; a server that fails costs only its own tools). Against a real MCP server
written with the `mcp` SDK, over stdio (started by the engine) and streamable HTTP (started by
the test)."""
from __future__ import annotations

import os

import pytest

from seats.tools.remote import FAILED, READY, STOPPED
from seats.tools.servers import ToolServers
from tests.node.harness import pid_alive
from tests.queue.waiting import eventually
from tests.seats.tooling import HttpToolServer, calls, stdio_entry, tool_company

pytestmark = pytest.mark.timeout(90)

SCRIPTED = {"name": "demo", "kind": "scripted", "reply": "ok"}


@pytest.fixture
async def servers(tmp_path):
    reports: list = []
    made = ToolServers(cwd=tmp_path, report=reports.append)
    made.reports = reports
    try:
        yield made
    finally:
        await made.stop()


def child_pids(tmp_path, name: str) -> list[int]:
    """The pids of live processes serving `name` for this test: a child's environment names its
    calls file, which is this test's own (other tests, here or in another checkout, have theirs)."""
    wanted = f"CALLS_FILE={tmp_path / (name + '.calls')}".encode()
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if wanted in f.read().split(b"\0") and pid_alive(int(pid)):
                    out.append(int(pid))
        except OSError:
            continue
    return out


def entry(name: str, tmp_path, **kw) -> dict:
    return stdio_entry(name, tmp_path / f"{name}.calls", **kw)


async def test_a_stdio_server_starts_lists_its_tools_namespaced_and_serves_a_call(servers, tmp_path):
    company = tool_company([SCRIPTED], [entry("notes", tmp_path)])
    await servers.on_company(company)
    [state] = servers.describe()
    assert (state["name"], state["state"], state["reason"]) == ("notes", READY, "")
    assert set(state["tools"]) == {"notes__append", "notes__add", "notes__fail", "notes__big", "notes__crash",
                                   "notes__meet", "notes__slow"}
    assert state["tool_count"] == 7
    alice = company.seat_by_handle("alice")
    [add] = [t for t in servers.tools_for(company, alice) if t.tool == "add"]
    assert add.spec.input_schema["required"] == ["a", "b"]
    outcome = await add.connection.call("add", {"a": 2, "b": 40})
    assert (outcome.text, outcome.is_error, outcome.error) == ("42", False, "")
    assert [c["tool"] for c in calls(tmp_path / "notes.calls")] == ["add"]
    assert servers.reports[-1][0]["state"] == READY


async def test_a_streamable_http_server_is_dialled_with_its_headers(servers, tmp_path):
    server = HttpToolServer(tmp_path / "http.calls").start()
    try:
        company = tool_company([SCRIPTED], [{"name": "remote", "transport": "http", "url": server.url,
                                             "headers": {"Authorization": "Bearer ${TOKEN}"}}], env={"TOKEN": "t-1"})
        await servers.on_company(company)
        [state] = servers.describe()
        assert (state["state"], state["transport"], state["tool_count"]) == (READY, "http", 7)
        [append] = [t for t in servers.tools_for(company, company.seat_by_handle("bob")) if t.tool == "append"]
        assert append.spec.name == "remote__append"
        outcome = await append.connection.call("append", {"text": "over http"})
        assert outcome.text == "stored: over http"
        assert calls(tmp_path / "http.calls") == [{"tool": "append", "arguments": {"text": "over http"},
                                                    "pid": server.proc.pid}]
    finally:
        server.stop()


async def test_a_server_that_does_not_start_costs_only_its_own_tools_and_says_why(servers, tmp_path, caplog):
    company = tool_company([SCRIPTED], [entry("broken", tmp_path, mode="exit_at_start"), entry("notes", tmp_path)])
    await servers.on_company(company)
    states = {s["name"]: s for s in servers.describe()}
    assert states["notes"]["state"] == READY
    assert states["broken"]["state"] == FAILED and states["broken"]["tool_count"] == 0
    said = "the server closed the connection before it answered (its stderr is in the log)"
    assert states["broken"]["reason"] == said
    [logged] = [r for r in caplog.records if r.getMessage() == "mcp_server_failed"]
    assert (logged.server, logged.reason) == ("broken", said)
    assert "toolserver: cannot open the database" in logged.stderr  # its stderr: in the log, never on /health
    offered = {t.spec.name for t in servers.tools_for(company, company.seat_by_handle("alice"))}
    assert offered and all(name.startswith("notes__") for name in offered)


@pytest.mark.parametrize("program, says", [("./no-such-server", "cannot start it: ./no-such-server: no such file"),
                                           ("no-such-server", "cannot start it: no-such-server: not found on the PATH"),
                                           ("./notes.md", "cannot start it: ./notes.md: not executable")])
async def test_a_command_that_cannot_be_started_is_a_failed_server_naming_it(servers, tmp_path, program, says):
    (tmp_path / "notes.md").write_text("not a program")
    company = tool_company([SCRIPTED], [{"name": "ghost", "transport": "stdio", "command": [program]}])
    await servers.on_company(company)
    [state] = servers.describe()
    assert state["state"] == FAILED and state["reason"].startswith(says)


# 8 s for the listing case: its start must fit the same bound first, and a Python child takes
# seconds to start on a loaded machine
@pytest.mark.parametrize("mode, timeout, step", [("hang_at_start", 1, "did not start within 1 s"),
                                                 ("hang_listing", 8, "did not list its tools within 8 s")])
async def test_a_server_that_hangs_is_bounded_by_its_startup_timeout_at_each_step(servers, tmp_path, mode, timeout, step):
    company = tool_company([SCRIPTED], [entry("slowpoke", tmp_path, mode=mode, startup_timeout_seconds=timeout)])
    await servers.on_company(company)
    [state] = servers.describe()
    assert state["state"] == FAILED and state["reason"].startswith(step)
    assert servers.tools_for(company, company.seat_by_handle("alice")) == []
    await eventually(lambda: child_pids(tmp_path, "slowpoke") == [], message="the hung child to be ended")


async def test_the_default_startup_timeout_is_ten_seconds_for_the_listing(servers, tmp_path):
    company = tool_company([SCRIPTED], [entry("slowpoke", tmp_path, mode="hang_listing")])
    assert company.tools.mcp[0].startup_timeout_seconds == 10
    await servers.on_company(company)
    [state] = servers.describe()
    assert state["reason"].startswith("did not list its tools within 10 s (startup_timeout_seconds)")


async def test_a_revision_stops_a_removed_server_restarts_a_changed_one_and_keeps_the_rest(servers, tmp_path):
    first = tool_company([SCRIPTED], [entry("keep", tmp_path), entry("change", tmp_path), entry("drop", tmp_path)])
    await servers.on_company(first)
    pids = {name: child_pids(tmp_path, name) for name in ("keep", "change", "drop")}
    assert all(len(p) == 1 for p in pids.values()), pids
    changed = entry("change", tmp_path, call_timeout_seconds=5)
    await servers.on_company(tool_company([SCRIPTED], [entry("keep", tmp_path), changed]))
    assert {s["name"]: s["state"] for s in servers.describe()} == {"keep": READY, "change": READY}
    assert child_pids(tmp_path, "keep") == pids["keep"]
    await eventually(lambda: not pid_alive(pids["drop"][0]), message="the removed server's child to end")
    await eventually(lambda: not pid_alive(pids["change"][0]), message="the changed server's old child to end")
    assert child_pids(tmp_path, "change") not in ([], pids["change"])


async def test_stop_ends_every_child(servers, tmp_path):
    await servers.on_company(tool_company([SCRIPTED], [entry("a", tmp_path), entry("b", tmp_path)]))
    pids = child_pids(tmp_path, "a") + child_pids(tmp_path, "b")
    assert len(pids) == 2
    await servers.stop()
    for pid in pids:
        await eventually(lambda pid=pid: not pid_alive(pid), message=f"child {pid} to end")
    assert servers.describe() == ()


async def test_a_server_is_offered_only_to_the_seats_or_roles_it_names(servers, tmp_path):
    company = tool_company([SCRIPTED], [entry("mine", tmp_path, seats=["alice"]), entry("pms", tmp_path, roles=["pm"]),
                                        entry("all", tmp_path)])
    await servers.on_company(company)

    def servers_of(handle: str) -> set[str]:
        return {t.server for t in servers.tools_for(company, company.seat_by_handle(handle))}

    assert servers_of("alice") == {"mine", "all"}
    assert servers_of("bob") == {"all"}
    assert servers_of("carol") == {"pms", "all"}
    assert servers_of("maya") == set()  # a human seat runs no turn


async def test_call_failures_come_back_as_outcomes_and_a_crash_marks_the_server_failed(servers, tmp_path):
    company = tool_company([SCRIPTED], [entry("t", tmp_path, call_timeout_seconds=1)])
    await servers.on_company(company)
    tools = {t.tool: t for t in servers.tools_for(company, company.seat_by_handle("alice"))}
    connection = tools["fail"].connection
    refused = await connection.call("fail", {"reason": "disk full"})
    assert refused.is_error and "refused: disk full" in refused.text
    slow = await connection.call("slow", {"seconds": 5})
    assert slow.error == "no answer within 1 s (call_timeout_seconds)"
    big = await connection.call("big", {"size": 2_000_000})
    assert len(big.text) == 2_000_000 and not big.error
    crashed = await connection.call("crash", {})
    assert crashed.error == "the tool server t closed the connection during the call"
    [state] = servers.describe()
    assert state["state"] == FAILED and "closed during a call of crash" in state["reason"]
    assert servers.tools_for(company, company.seat_by_handle("alice")) == []
    after = await connection.call("add", {"a": 1, "b": 1})
    assert after.error.startswith("the tool server t is failed")


async def test_stopped_servers_read_stopped(tmp_path):
    servers = ToolServers(cwd=tmp_path)
    await servers.on_company(tool_company([SCRIPTED], [entry("t", tmp_path)]))
    connection = servers.connections["t"]
    await servers.stop()
    assert connection.state == STOPPED
