"""The Company page's tool servers panel, in a real headless Chromium against a real node whose
company declares two MCP tool servers over stdio (issue "Turns that act", item 8; seed 002,
probes): the test's server written with the `mcp` SDK, which starts and lists its tools, and
one that exits at start. The page shows each server's name, transport, health as /health
reports it (the broken one's reason with it) and the tools it lists, and no value of a
server's env.

Every wait is for an element or a state, with a deadline; nothing asserts a duration.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.dashboard.test_browser import PASSWORD, USER, browser, page, shot  # noqa: F401  (fixtures)
from tests.node.harness import ROOT, NodeProcess, clean_env, eventually
from tests.seats.tooling import TOOLSERVER

pytestmark = pytest.mark.timeout(180)

SECRET = "calc-env-secret-value-5f1e2d"


def company(home) -> str:
    return f"""
name: nimbus
providers:
  llm:
    - {{name: local, kind: scripted, reply: "Done."}}
tools:
  mcp:
    - name: calc
      transport: stdio
      command: ["{sys.executable}", "{TOOLSERVER}", "stdio"]
      env:
        CALLS_FILE: "{home / 'calc.calls'}"
        CALC_TOKEN: "{SECRET}"
      seats: [alice]
    - name: broken
      transport: stdio
      command: ["{sys.executable}", "{TOOLSERVER}", "stdio"]
      env:
        MODE: exit_at_start
        CALLS_FILE: "{home / 'broken.calls'}"
org:
  seats:
    - {{handle: maya, kind: human, role: founder}}
    - {{handle: alice, kind: agent, role: engineer, reports_to: maya}}
"""


def settled(node: NodeProcess) -> dict | None:
    """/health's tool servers by name, once neither is still starting."""
    health = node.probe("/health")
    shown = {s["name"]: s for s in (health[1] or {}).get("tool_servers", [])} if health else {}
    return shown if {s.get("state") for s in shown.values()} == {"ready", "failed"} else None


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A node running the two tool servers, with a superuser in its store."""
    home = tmp_path_factory.mktemp("tools") / "node-1"
    proc = NodeProcess(home=home)
    proc.start(company=company(home))
    try:
        proc.wait_ready(90)
        env = {**clean_env(), "CREWLET_CONFIG": str(proc.home / "crewlet.yaml"), "DJANGO_SUPERUSER_USERNAME": USER,
               "DJANGO_SUPERUSER_PASSWORD": PASSWORD, "DJANGO_SUPERUSER_EMAIL": "operator@example.com"}
        made = subprocess.run([sys.executable, "manage.py", "createsuperuser", "--noinput"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        eventually(lambda: settled(proc), 60, "both tool servers settled on /health", proc)
        yield proc
    finally:
        proc.stop()


def test_the_company_page_shows_each_tool_server_its_health_and_its_tools(page, node, shot):
    from playwright.sync_api import expect

    health = settled(node)
    page.click('nav a:has-text("Company")')
    page.wait_for_url(f"{node.base}/dashboard/company/")
    panel = page.locator("#tool-servers")
    calc, broken = panel.locator('tr[data-server="calc"]'), panel.locator('tr[data-server="broken"]')
    expect(calc).to_be_visible()
    shot(page, "company-tool-servers")

    assert calc.locator("td").nth(1).inner_text() == "stdio"
    assert calc.locator('[data-field="state"]').inner_text().strip() == health["calc"]["state"] == "ready"
    assert calc.locator('[data-field="tool_count"]').inner_text() == str(health["calc"]["tool_count"])
    listed = calc.locator('[data-field="tools"] code').all_inner_texts()
    assert len(listed) == health["calc"]["tool_count"] and "calc__add" in listed, listed

    state = broken.locator('[data-field="state"]').inner_text()
    assert state.startswith(health["broken"]["state"]) and state.startswith("failed")
    assert health["broken"]["reason"] and health["broken"]["reason"] in state  # the reason /health gives
    assert broken.locator('[data-field="tool_count"]').inner_text() == "0"
    assert SECRET not in page.content()
