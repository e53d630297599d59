"""The operator's first hour, in a real headless Chromium against a real node process: a task
given from the seat page appears live with its text and then its reply; a webhook-woken turn's
trace is a waterfall (webhook -> notification -> turn -> phase -> round) with durations; a
failed turn is red; /api/docs renders with every request beyond 127.0.0.1 blocked; the
Overview fits a 390 px screen without scrolling sideways.

Every wait is for an element or a state, with a deadline; nothing asserts a duration. Each test
saves a screenshot in its temporary directory.
"""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from urllib.parse import urlsplit

import pytest

from tests.dashboard.test_browser import PASSWORD, USER, WAIT_MS, browser, page, shot  # noqa: F401  (fixtures)
from tests.node.harness import ADMIN, READER, ROOT, NodeProcess, clean_env, eventually
from tests.notify import deliveries as vendor
from tests.notify.http import post

pytestmark = pytest.mark.timeout(180)

REPLY = "On it, from the scripted model."
# dave's day is capped at one token: his first turn is charged past it and ends budget_exhausted,
# a failed turn, with nothing else about the node changed.
COMPANY = vendor.company_yaml(provider=f'{{name: local, kind: scripted, delay_seconds: 0.2, reply: "{REPLY}"}}').replace(
    "    - {handle: carol, kind: agent, role: pm, reports_to: maya}\n",
    "    - {handle: carol, kind: agent, role: pm, reports_to: maya}\n"
    "    - {handle: dave, kind: agent, role: analyst, reports_to: carol, token_budget: {day: 1}}\n")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """One node for the module, with a superuser in its store and every seat claimed."""
    proc = NodeProcess(home=tmp_path_factory.mktemp("operator") / "node-1")
    proc.start(company=COMPANY, env=vendor.ENV)
    try:
        proc.wait_ready(90)
        env = {**clean_env(), "CREWLET_CONFIG": str(proc.home / "crewlet.yaml"), "DJANGO_SUPERUSER_USERNAME": USER,
               "DJANGO_SUPERUSER_PASSWORD": PASSWORD, "DJANGO_SUPERUSER_EMAIL": "operator@example.com"}
        made = subprocess.run([sys.executable, "manage.py", "createsuperuser", "--noinput"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        eventually(lambda: set(proc.probe("/health")[1]["seats"]) == {"alice", "bob", "carol", "dave"}, 60,
                   "the seats to be claimed", proc)
        yield proc
    finally:
        proc.stop()


def assign(node: NodeProcess, handle: str, text: str) -> dict:
    request = urllib.request.Request(f"{node.base}/seats/{handle}/tasks", data=json.dumps({"text": text}).encode(), method="POST")
    request.add_header("Authorization", f"Bearer {ADMIN}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 202
        return json.loads(response.read())


def turn_of(node: NodeProcess, trigger_id: str) -> dict:
    def found():
        _, body, _ = node.get("/events?type=agent_turn_completed&limit=100", token=READER)
        return next((e for e in (body or {}).get("items", []) if trigger_id in (e.get("trigger_ids") or [])), None)

    return eventually(found, 30, f"the turn of {trigger_id}", node)


def test_a_task_given_from_the_seat_page_appears_live_with_its_text_and_then_its_reply(page, node, shot):
    from playwright.sync_api import expect

    page.goto(f"{node.base}/dashboard/seats/alice/")
    page.wait_for_selector('#live-status[data-state="live"]')
    page.fill("#task-text", "Write the release notes for 1.4")
    page.click('button[data-action="task"]')
    link = page.locator('#task-result a[data-trace-id]')
    expect(link).to_be_visible()
    # The page stayed put (the socket too): the task arrives with its words, then the reply.
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    task = page.locator('#seat-events li[data-type="task_assigned"] blockquote[data-part="task-text"]').first
    expect(task).to_have_text("Write the release notes for 1.4")
    expect(page.locator('#seat-events li[data-type="task_assigned"]').first).to_contain_text(f"{USER} assigned alice")
    reply = page.locator('#seat-events li[data-type="agent_turn_completed"] blockquote[data-part="turn-reply"]').first
    expect(reply).to_have_text(REPLY)
    expect(page.locator("#seat-turns tbody tr[data-outcome='completed']").first).to_contain_text(REPLY)
    shot(page, "seat-task")

    # The answer's trace link leads to the task's waterfall, the turn beneath it.
    trace_id = link.get_attribute("data-trace-id")
    link.click()
    page.wait_for_url(f"**/dashboard/traces/{trace_id}/")
    expect(page.locator('.wf-row[data-kind="task"][data-depth="0"]')).to_be_visible()
    expect(page.locator('.wf-row[data-kind="turn"][data-depth="1"][data-status="ok"]')).to_be_visible()


def test_the_waterfall_of_a_webhook_woken_turn_shows_the_nesting_and_the_durations(page, node, shot):
    from playwright.sync_api import expect

    body = vendor.dumps(vendor.github_comment("@octo-alice and @octo-maya the upload retries twice", number=41,
                                              author="octo-bob", pr_author="nobody"))
    status, answer, _ = post(node, "/webhooks/github", body, vendor.github_headers(body))
    assert status == 202, answer
    trace_id = answer["trace_id"]
    eventually(lambda: node.get(f"/events?trace_id={trace_id}&type=agent_turn_completed", token=READER)[1]["items"], 30,
               "the turn of the delivery", node)

    # The 8 characters the tables show, pasted into the trace box, open the trace.
    page.fill('header .trace-search input[name="q"]', trace_id[:8])
    page.press('header .trace-search input[name="q"]', "Enter")
    page.wait_for_url(f"**/dashboard/traces/{trace_id}/")
    rows = page.locator(".wf-row[data-kind]:not(.wf-axis)")
    expect(page.locator('.wf-row[data-kind="round"]')).to_be_visible()
    drawn = [(r.get_attribute("data-depth"), r.get_attribute("data-kind")) for r in rows.all()]
    assert drawn[:5] == [("0", "webhook"), ("1", "notification"), ("2", "turn"), ("3", "phase"), ("4", "round")], drawn
    assert ("1", "notification") in drawn[5:]  # maya's skip, beside alice's wake
    expect(page.locator('.wf-row[data-status="skipped"] .skip-reason')).to_contain_text("the routing gate refuses it")

    turn = page.locator('.wf-row[data-kind="turn"]')
    took = float(turn.locator(".wf-took").get_attribute("data-took"))
    assert took > 0  # a span, with its duration on the trace's clock
    width = turn.locator(".wf-bar").evaluate("b => b.getBoundingClientRect().width")
    assert width > 3
    assert page.locator('.wf-row[data-kind="webhook"] .wf-mark').count() == 1  # an instant is a diamond

    turn.click()  # the prompt and the reply, one click away
    detail = page.locator('.wf-detail[data-for^="turn:"]')
    expect(detail.locator('[data-part="prompt"]')).to_contain_text("upload retries twice")
    expect(detail.locator('[data-part="reply"]')).to_have_text(REPLY)
    shot(page, "waterfall")


def test_a_failed_turn_is_red_in_its_trace_and_on_its_seat(page, node, shot):
    from playwright.sync_api import expect

    answer = assign(node, "dave", "Summarise the quarter")
    turn = turn_of(node, answer["event_id"])
    assert turn["outcome"] == "budget_exhausted" and turn["failed"]

    page.goto(answer["trace_url"])
    failed = page.locator('.wf-row[data-kind="turn"][data-status="failed"]')
    expect(failed).to_be_visible()
    expect(failed).to_contain_text("budget exhausted")
    red = failed.locator(".wf-bar").evaluate("b => getComputedStyle(b).backgroundColor")
    assert red == "rgb(192, 57, 43)", red
    expect(page.locator(".trace-facts")).to_contain_text("failed")
    shot(page, "failed-turn")

    page.goto(f"{node.base}/dashboard/seats/dave/")
    expect(page.locator(f'#seat-turns tr.failed[data-event-id="{turn["id"]}"]')).to_be_visible()
    expect(page.locator(f'#seat-turns tr[data-event-id="{turn["id"]}"] .outcome')).to_have_text("budget_exhausted")


def test_the_api_docs_render_with_every_request_beyond_the_node_blocked(browser, node, shot):  # noqa: F811
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    blocked: list[str] = []

    def only_the_node(route):
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            return route.continue_()
        blocked.append(route.request.url)
        return route.abort()

    context.route("**/*", only_the_node)
    try:
        docs = context.new_page()
        docs.set_default_timeout(WAIT_MS)
        docs.goto(f"{node.base}/api/docs")
        _, schema, _ = node.get("/api/openapi.json")
        operations = sum(len([m for m in item if m in ("get", "put", "post", "delete")]) for item in schema["paths"].values())
        expect(docs.locator(".opblock")).to_have_count(operations)
        expect(docs.locator(".opblock-summary-path", has_text="/seats/{handle}/tasks")).to_be_visible()
        expect(docs.locator(".opblock-summary-path", has_text="/webhooks/{source}")).to_be_visible()
        assert blocked == []  # nothing was even asked of a CDN
        shot(docs, "api-docs-offline")
    finally:
        context.close()


def test_the_overview_fits_a_390_px_screen_without_scrolling_sideways(browser, node, shot):  # noqa: F811
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        phone = context.new_page()
        phone.set_default_timeout(WAIT_MS)
        phone.goto(node.base + "/dashboard/login/")
        phone.fill("input[name=username]", USER)
        phone.fill("input[name=password]", PASSWORD)
        phone.click("button[type=submit]")
        phone.wait_for_url(node.base + "/dashboard/")
        phone.wait_for_selector('#live-status[data-state="live"]')
        expect(phone.locator('#seats tr[data-seat="alice"] td.mailbox')).not_to_contain_text("…")
        widths = phone.evaluate("() => [document.documentElement.scrollWidth, document.body.scrollWidth, window.innerWidth]")
        assert max(widths[:2]) <= widths[2], widths
        for path in ("/dashboard/events/", "/dashboard/seats/alice/", "/dashboard/company/"):
            phone.goto(node.base + path)
            phone.wait_for_selector('#live-status[data-state="live"]')
            widths = phone.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
            assert widths[0] <= widths[1], (path, widths)
            # Nor is anything cut off at the right edge: every panel fits the screen.
            over = phone.evaluate("() => [...document.querySelectorAll('.panel, .figure, header.top')]"
                                  ".filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5).map(e => e.className)")
            assert over == [], (path, over)
            shot(phone, "390" + path.rstrip("/").replace("/", "-"), full_page=False)
        phone.goto(node.base + "/dashboard/")
        phone.wait_for_selector('#live-status[data-state="live"]')
        shot(phone, "overview-390")
        shot(phone, "overview-390-first-screen", full_page=False)
    finally:
        context.close()
