"""Finding 13: no Content-Security-Policy; /api/docs loaded a floating-major Swagger from a CDN
without integrity; every sign-in redirected to /accounts/profile/, a 404. Now every page
carries the policy of crewlet_site.browser, which the dashboard and the admin pass in a real
Chromium with no violation; the docs are served from the django-ninja package's own files;
a sign-in with nowhere to go lands on the dashboard."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.notify import deliveries as d
from tests.notify.http import post
from tests.security.conftest import Session, make_user, no_traceback, still_ready

pytestmark = pytest.mark.timeout(180)

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
USER, PASSWORD = "viewer", "a-viewer-password-0123"
WAIT_MS = 30_000
# Every violation a page reports, however it reports it.
WATCH = """window.__violations = [];
document.addEventListener('securitypolicyviolation', e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"""


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `make chromium` installs it"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def signed_in(browser, node):
    make_user(node, USER, PASSWORD)
    body = d.dumps(d.github_comment("@octo-alice a turn for the trace page"))
    status, answer, _ = post(node, "/webhooks/github", body, d.github_headers(body))
    assert status == 202
    context = browser.new_context()
    context.add_init_script(WATCH)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    console: list[str] = []
    requests: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(node.base + "/dashboard/login/")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(node.base + "/dashboard/")
    yield page, console, requests, answer["trace_id"]
    context.close()


PAGES = ["/dashboard/", "/dashboard/events/", "/dashboard/company/", "/dashboard/seats/alice/", "/admin/",
         "/admin/engine/companyrevision/", "/api/docs"]


@pytest.mark.parametrize("path", PAGES)
def test_each_page_carries_the_policy_and_raises_no_violation(node, signed_in, path):
    page, console, requests, _ = signed_in
    console.clear()
    requests.clear()
    response = page.goto(node.base + path)
    assert response.status == 200
    assert "default-src 'self'" in response.headers["content-security-policy"]
    page.wait_for_load_state("networkidle")
    if path.startswith("/dashboard/"):
        page.wait_for_selector('#live-status[data-state="live"]')  # its script ran and its socket opened
    if path == "/api/docs":
        page.wait_for_selector(".swagger-ui .info")  # Swagger UI rendered from local files
    assert page.evaluate("window.__violations") == []
    assert not [m for m in console if "Content Security Policy" in m]
    assert all(url.startswith(node.base) or url.startswith("data:") for url in requests), requests


def test_the_trace_page_passes_too(node, signed_in):
    page, console, _, trace_id = signed_in
    console.clear()
    page.goto(node.base + f"/dashboard/traces/{trace_id}/")
    page.wait_for_selector('#live-status[data-state="live"]')
    assert page.evaluate("window.__violations") == []
    still_ready(node)
    no_traceback(node)


def test_a_sign_in_with_nowhere_to_go_lands_on_the_dashboard(node, signed_in):
    session = Session(node.base)
    session.request("GET", "/dashboard/login/")
    status, headers, _ = session.request("POST", "/dashboard/login/", {
        "username": USER, "password": PASSWORD, "csrfmiddlewaretoken": session.cookie("csrftoken")})
    assert status == 302 and headers["Location"] == "/dashboard/"
