"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) against a real node
process: sign in, see the seats, watch a turn happen live, filter the event log, open a
trace tree and inspect a turn, pause and resume a seat, activate a revision from the admin,
and see the page say so when its socket drops and come back by itself (STYLE.md: "Browser-
facing pages are tested in a real headless Chromium").

Every wait is for an element or a state, with a deadline; nothing asserts a duration.
Screenshots land in each test's temporary directory. `make test` installs Chromium first.
"""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.node.harness import ADMIN, READER, ROOT, NodeProcess, clean_env, eventually
from tests.notify import deliveries as vendor
from tests.notify.http import post

pytestmark = pytest.mark.timeout(180)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
USER, PASSWORD = "operator", "a-long-operator-password-1"
WAIT_MS = 30_000  # a deadline for an element, not a measurement


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """One node for the module (its boot is the slow part), with a superuser in its store."""
    proc = NodeProcess(home=tmp_path_factory.mktemp("browser") / "node-1")
    proc.start(company=vendor.company_yaml(), env=vendor.ENV)  # GitHub and Slack secrets as ${VAR}s
    try:
        proc.wait_ready(90)
        # CREWLET_CONFIG names the node's file, as manage.py's `--config` would (createsuperuser
        # itself refuses an argument it does not declare).
        env = {**clean_env(), "CREWLET_CONFIG": str(proc.home / "crewlet.yaml"), "DJANGO_SUPERUSER_USERNAME": USER,
               "DJANGO_SUPERUSER_PASSWORD": PASSWORD, "DJANGO_SUPERUSER_EMAIL": "operator@example.com"}
        made = subprocess.run([sys.executable, "manage.py", "createsuperuser", "--noinput"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        eventually(lambda: set(proc.probe("/health")[1]["seats"]) == {"alice", "bob", "carol"}, 60, "the seats to be claimed", proc)
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `make chromium` installs it (apt-get install chromium)"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, node):
    """A signed-in page: the root leads to the sign-in, which leads to the Overview."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(node.base + "/")
    page.wait_for_url("**/dashboard/login/**")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(node.base + "/dashboard/")
    page.wait_for_selector('#live-status[data-state="live"]')
    yield page
    context.close()


@pytest.fixture
def shot(tmp_path):
    """`shot(page, name)`: a screenshot in the test's temporary directory (the whole page unless
    `full_page=False`, the screen a person sees first)."""
    def take(page, name: str, full_page: bool = True) -> Path:
        path = tmp_path / f"{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        return path

    return take


def assign(node: NodeProcess, handle: str, text: str) -> str:
    """POST /seats/{handle}/tasks with the admin token: the task's event id."""
    request = urllib.request.Request(f"{node.base}/seats/{handle}/tasks", data=json.dumps({"text": text}).encode(), method="POST")
    request.add_header("Authorization", f"Bearer {ADMIN}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["event_id"]


def turn_for(node: NodeProcess, task_id: str) -> dict:
    """The stored agent_turn_completed that the task woke."""
    def found():
        status, body, _ = node.get("/events?type=agent_turn_completed&limit=50", token=READER)
        return next((e for e in (body or {}).get("items", []) if task_id in (e.get("trigger_ids") or [])), None)

    return eventually(found, 30, f"the turn of task {task_id}", node)


def test_an_operator_sees_every_seat_and_watches_a_turn_happen_live(page, node, shot):
    from playwright.sync_api import expect

    for handle in ("maya", "alice", "bob", "carol"):
        expect(page.locator(f'#seats tr[data-seat="{handle}"]')).to_be_visible()
    expect(page.locator('#seats tr[data-seat="maya"] .state')).to_have_text("person")
    expect(page.locator('#seats tr[data-seat="alice"] td.holder')).to_have_text("node-1")
    expect(page.locator('#seats tr[data-seat="alice"]')).to_have_attribute("data-state", "idle")
    before = page.locator('#feed li[data-type="agent_turn_completed"]').count()

    # A signed GitHub comment for alice (and maya, a person: the gate skips her).
    body = vendor.dumps(vendor.github_comment("@octo-alice and @octo-maya the upload retries twice", number=7,
                                              author="octo-bob", pr_author="nobody"))
    status, answer, _ = post(node, "/webhooks/github", body, vendor.github_headers(body))
    assert status == 202, answer
    # The turn arrives over the socket: the feed grows and alice's row names the turn.
    expect(page.locator('#feed li[data-type="agent_turn_completed"]')).to_have_count(before + 1)
    expect(page.locator('#seats tr[data-seat="alice"] td.last-turn')).to_contain_text("alice completed a turn")
    expect(page.locator('[data-total="turns_24h"]')).not_to_have_text("0")
    expect(page.locator('#feed li[data-type="webhook:issue_comment"]').first).to_be_visible()
    shot(page, "overview")

    # Its trace: the delivery is the header, the skip's reason inline, the turn beneath its wake.
    page.goto(f"{node.base}/dashboard/traces/{answer['trace_id']}/")
    expect(page.locator(".trace-root")).to_contain_text("webhook:issue_comment")
    expect(page.locator('.wf-row[data-kind="notification"][data-status="skipped"] .skip-reason')).to_contain_text("the routing gate refuses it")
    expect(page.locator('.wf-row[data-kind="turn"][data-depth="2"]')).to_be_visible()
    shot(page, "trace-webhook")


def test_the_event_log_filters_and_leads_to_a_trace_tree_and_an_inspected_turn(page, node, shot):
    from playwright.sync_api import expect

    task = assign(node, "bob", "triage the new issues")
    turn = turn_for(node, task)
    page.click("nav >> text=Event log")
    page.wait_for_url("**/dashboard/events/")
    rows = page.locator("#log tbody tr")
    expect(rows.first).to_be_visible()

    page.click('.chip[data-category="task"]')
    expect(page.locator('.chip[data-category="task"]')).to_have_attribute("aria-pressed", "true")
    expect(page.locator(f'#log tr[data-event-id="{task}"]')).to_be_visible()
    expect(page.locator('#log tbody tr:not([data-category="task"])')).to_have_count(0)
    assert "category=task" in page.url

    page.click('.chip[data-category=""]')
    page.fill("input[name=type]", "agent_turn_completed")
    page.select_option("select[name=agent]", "bob")
    page.click("#filters button[type=submit]")
    expect(page.locator(f'#log tr[data-event-id="{turn["id"]}"]')).to_be_visible()
    expect(page.locator('#log tbody tr:not([data-type="agent_turn_completed"])')).to_have_count(0)
    shot(page, "event-log")

    page.click(f'#log tr[data-event-id="{turn["id"]}"] a.trace-link')
    page.wait_for_url(f"**/dashboard/traces/{turn['trace_id']}/")
    # The task is the root; its turn hangs under it, its phase under the turn.
    expect(page.locator(".trace-root")).to_contain_text("assigned bob")
    nested = page.locator(f'.wf-row[data-kind="turn"][data-depth="1"][data-key="turn:{turn["turn_id"]}"]')
    expect(nested).to_be_visible()
    expect(page.locator('.wf-row[data-kind="phase"][data-depth="2"]')).to_be_visible()
    shot(page, "trace")

    nested.click()
    page.locator(".wf-detail a.inspect").click()
    page.wait_for_url("**/inspect/")
    expect(page.locator('[data-part="user-prompt"]').first).to_contain_text("triage the new issues")
    expect(page.locator('[data-part="response"]').first).not_to_be_empty()
    shot(page, "inspect")


def test_a_staff_user_pauses_and_resumes_a_seat_from_its_page(page, node, shot):
    from playwright.sync_api import expect

    page.click('#seats tr[data-seat="carol"] a.handle')
    page.wait_for_url("**/dashboard/seats/carol/")
    page.wait_for_selector('#live-status[data-state="live"]')
    state = page.locator('#seat [data-field="state"]')
    expect(state).to_have_attribute("data-state", "idle")
    expect(page.locator('[data-field="mailbox"]')).to_have_text("0 waiting, 0 in flight")
    page.fill("input[name=reason]", "reviewing her prompts")
    page.click('button[data-action="pause"]')
    expect(page.locator(".messages")).to_contain_text("carol is paused")
    expect(state).to_have_attribute("data-state", "paused")
    expect(page.locator('[data-field="paused"]')).to_contain_text("reviewing her prompts")
    status, body, _ = node.get("/seats/carol", token=READER)
    assert body["paused"]["paused_by"] == USER  # the person, by the name they sign in with
    shot(page, "seat-paused")
    page.click('button[data-action="resume"]')
    expect(page.locator(".messages")).to_contain_text("carol is resumed")
    expect(state).to_have_attribute("data-state", "idle")
    expect(page.locator("#seat-events li").first).to_contain_text("resumed")


def test_an_admin_activates_an_older_revision_and_the_company_page_shows_it(page, node, shot):
    from playwright.sync_api import expect

    status, _, _ = node.put("/config", vendor.company_yaml(extra="notification_rate_limit: 5\n").encode())
    assert status == 200
    page.goto(node.base + "/admin/engine/companyrevision/")
    first = page.locator("#result_list tbody tr", has_text="node:node-1").first
    first.locator("input.action-select").check()
    page.select_option("select[name=action]", "activate_revision")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text("is the active revision")
    page.goto(node.base + "/dashboard/company/")
    expect(page.locator('[data-field="generation"]')).to_have_text("3")
    eventually(lambda: node.probe("/health")[1]["revision"] == 3, 30, "the node to apply generation 3", node)
    shot(page, "company")


def test_the_page_says_when_its_socket_drops_and_reconnects_by_itself(page, node, shot):
    from playwright.sync_api import expect

    status = page.locator("#live-status")
    node.stop()  # the node drains: its socket closes
    expect(status).to_have_attribute("data-state", "down")
    expect(page.locator('#live-notes [data-note="socket"]')).to_contain_text("dropped")
    expect(page.locator("#live-retry")).to_be_visible()  # "retry now"
    page.click("#live-retry")  # nothing answers yet: it is down again, and says so
    expect(status).to_have_attribute("data-state", "down")
    shot(page, "socket-down")
    node.start()  # the same store, port and keyring: the session survives
    node.wait_ready(90)
    expect(status).to_have_attribute("data-state", "live", timeout=90_000)
    expect(page.locator('#live-notes [data-note="socket"]')).to_have_count(0)
    expect(page.locator('#seats tr[data-seat="alice"]')).to_be_visible()
