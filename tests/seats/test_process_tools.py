"""A real node whose agents act through tools: a company declaring an MCP tool server (the test's,
written with the `mcp` SDK, started by the node over stdio), another that cannot start, and an
OpenAI-compatible model endpoint in the test that answers with a tool call, then with a final
answer. The node shows its tool servers on /health, keeps serving past the broken one, runs the
tool in a turn, and its stdio children die with it."""
from __future__ import annotations

import json
import signal
import sys
import urllib.request

import pytest

from tests.node.harness import ADMIN, READER, ROOT, NodeProcess, eventually, pid_alive
from tests.seats.test_providers import ChatEndpoint, Reply, chat_body
from tests.seats.test_tool_servers import child_pids
from tests.seats.tooling import TOOLSERVER, calls, openai_calls

pytestmark = pytest.mark.timeout(180)


def company(endpoint: ChatEndpoint, home) -> str:
    return f"""
name: nimbus
providers:
  llm:
    - {{name: main, kind: openai, base_url: "{endpoint.base_url}", model: test-model, max_retries: 0}}
tools:
  mcp:
    - name: calc
      transport: stdio
      command: ["{sys.executable}", "{TOOLSERVER}", "stdio"]
      env: {{CALLS_FILE: "{home / 'calc.calls'}"}}
      seats: [alice]
    - name: broken
      transport: stdio
      command: ["{sys.executable}", "{TOOLSERVER}", "stdio"]
      env: {{MODE: exit_at_start, CALLS_FILE: "{home / 'broken.calls'}"}}
org:
  seats:
    - {{handle: maya, kind: human, role: founder}}
    - {{handle: alice, kind: agent, role: engineer, reports_to: maya}}
"""


def assign(node: NodeProcess, text: str) -> str:
    request = urllib.request.Request(node.base + "/seats/alice/tasks", data=json.dumps({"text": text}).encode(),
                                     method="POST", headers={"Authorization": f"Bearer {ADMIN}",
                                                             "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["event_id"]


def test_a_node_runs_a_tool_using_turn_shows_its_servers_and_takes_its_children_down_with_it(tmp_path):
    endpoint = ChatEndpoint().start()
    node = NodeProcess(home=tmp_path / "node-1")
    try:
        endpoint.script = [Reply(body=openai_calls(("call_1", "calc__add", {"a": 19, "b": 23}), text="Adding.")),
                           Reply(body=chat_body("The total is 42."))]
        node.start(company=company(endpoint, tmp_path))
        node.wait_ready()

        def servers():
            health = node.probe("/health")
            shown = {s["name"]: s for s in (health[1] or {}).get("tool_servers", [])} if health else {}
            return shown if {s.get("state") for s in shown.values()} == {"ready", "failed"} else None

        shown = eventually(servers, 30, "both tool servers settled on /health", node)
        assert (shown["calc"]["state"], shown["calc"]["tool_count"], shown["calc"]["transport"]) == ("ready", 7, "stdio")
        assert shown["broken"]["state"] == "failed" and shown["broken"]["reason"]
        [failed] = [line for line in node.log_lines() if line.get("msg") == "mcp_server_failed"]
        assert failed["server"] == "broken" and "cannot open the database" in failed["stderr"]

        event_id = assign(node, "Add up the invoices")
        eventually(lambda: calls(tmp_path / "calc.calls"), 30, "the tool server to be called", node)
        assert [(c["tool"], c["arguments"]) for c in calls(tmp_path / "calc.calls")] == [("add", {"a": 19, "b": 23})]

        def completed():
            status, body, _ = node.get("/events?type=agent_turn_completed", READER)
            return status == 200 and [e for e in body["items"] if event_id in (e.get("trigger_ids") or [])]

        [turn] = eventually(completed, 30, "the turn's completion", node)
        assert (turn["outcome"], turn["tools_used"], turn["response"]) == ("completed", ["calc__add"], "The total is 42.")
        second = endpoint.requests[1]["body"]["messages"]
        assert second[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "42"}
        status, body, _ = node.get("/events?type=agent_phase_completed", READER)
        [phase] = [e for e in body["items"] if e.get("turn_id") == turn["turn_id"]]
        assert phase["tool_calls"][0]["result"] == "42" and phase["rounds"][0]["text"] == "Adding."

        [child] = child_pids(tmp_path, "calc")
        node.signal(signal.SIGKILL)
        node.wait_exit(30)
        eventually(lambda: not pid_alive(child), 15, "the stdio child to die with the node")
    finally:
        node.stop()
        endpoint.stop()


def test_the_bundled_example_company_runs_a_tool_using_turn_offline(tmp_path):
    """What `make run` shows: the scripted model calls the example's notes server, then replies."""
    text = (ROOT / "examples" / "company.yaml").read_text()
    assert 'NOTES_DIR: "var/notes"' in text
    text = text.replace('NOTES_DIR: "var/notes"', f'NOTES_DIR: "{tmp_path / "notes"}"')  # not the checkout's var/
    secrets = {name: "example-secret" for name in ("GITHUB_WEBHOOK_SECRET", "SLACK_SIGNING_SECRET",
                                                   "GITLAB_WEBHOOK_TOKEN", "JIRA_WEBHOOK_SECRET",
                                                   "MATTERMOST_WEBHOOK_TOKEN")}
    node = NodeProcess(home=tmp_path / "node-1")
    try:
        node.start(company=text, env=secrets)
        node.wait_ready()
        event_id = assign(node, "Write the release notes")
        notebook = tmp_path / "notes" / "notes.md"
        eventually(notebook.exists, 60, "the notes tool to write the notebook", node)
        assert "assigned alice: Write the release notes" in notebook.read_text()

        def completed():
            status, body, _ = node.get("/events?type=agent_turn_completed", READER)
            return status == 200 and [e for e in body["items"] if event_id in (e.get("trigger_ids") or [])]

        [turn] = eventually(completed, 30, "the turn's completion", node)
        assert (turn["outcome"], turn["tools_used"], turn["iterations"]) == ("completed", ["notes__append"], 2)
        assert turn["response"].startswith("On it. (")
    finally:
        node.stop()
