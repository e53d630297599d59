"""The screens through Django's async test client, on the loop the twin node runs on: who may
see them, what an event's detail and `inspect ->` show, the company page's redaction, the
seat page's pause and resume (staff, CSRF, the REST route's own function), the admin."""
from __future__ import annotations

import html
import re
from datetime import datetime, timedelta, timezone

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.test import AsyncClient

from engine.config import parse_company
from engine.revisions import store_revision
from events.store import write_events
from tests.dashboard.conftest import make_event
from tests.handover import NodeClient

pytestmark = [pytest.mark.timeout(60), pytest.mark.django_db(transaction=True)]

T0 = datetime.now(timezone.utc) - timedelta(minutes=10)
SECRET_DOC = """name: nimbus
org:
  seats:
    - {handle: alice, kind: agent}
integrations:
  github:
    webhook_secret: "literally-the-secret"
    users: {}
"""


@pytest.fixture
async def node(twin):
    """The twin as the node the views are handed (as the node's ASGI layer hands it)."""
    twin.env = {}
    return twin


async def signed_in(staff: bool, node=None, **client_kwargs) -> AsyncClient:
    make = get_user_model().objects.create_superuser if staff else get_user_model().objects.create_user
    name = "root" if staff else "viewer"
    user = await sync_to_async(make)(name, password="a-long-password-1", **({"email": "root@example.com"} if staff else {}))
    client = NodeClient(node, **client_kwargs)
    await client.aforce_login(user)
    return client


async def test_every_screen_asks_for_a_sign_in_and_the_root_leads_to_the_dashboard():
    client = AsyncClient()
    response = await client.get("/")
    assert response.status_code == 302 and response["Location"] == "/dashboard/"
    for url in ("/dashboard/", "/dashboard/events/", "/dashboard/company/", "/dashboard/seats/alice/",
                "/dashboard/traces/abc/"):
        response = await client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/dashboard/login/?next="), url
    login = await client.get("/dashboard/login/")
    assert login.status_code == 200 and b"csrfmiddlewaretoken" in login.content


async def test_a_user_signs_in_with_a_password_and_a_csrf_token():
    await sync_to_async(get_user_model().objects.create_user)("ops", password="a-long-password-1")
    client = AsyncClient(enforce_csrf_checks=True)
    page = await client.get("/dashboard/login/")
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.content).group(1).decode()
    response = await client.post("/dashboard/login/", {"username": "ops", "password": "a-long-password-1",
                                                       "csrfmiddlewaretoken": token, "next": "/dashboard/events/"})
    assert response.status_code == 302 and response["Location"] == "/dashboard/events/"
    assert (await client.get("/dashboard/events/")).status_code == 200


async def test_an_event_detail_pretty_prints_its_payload_and_a_turn_can_be_inspected(company):
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    phase = make_event("agent_phase_completed", company, "alice", at=T0, trace_id=trace_id, turn_id="t1", phase="act",
                       system_prompt="You are alice.", user_prompt="Fix <the> bug", response="Done & dusted")
    turn = make_event("agent_turn_completed", company, "alice", at=T0 + timedelta(seconds=1), trace_id=trace_id,
                      turn_id="t1", response="Done & dusted")
    await sync_to_async(write_events)([phase, turn])
    client = await signed_in(False)
    detail = await client.get(f"/dashboard/events/{turn.id}/")
    body = detail.content.decode()
    assert detail.status_code == 200
    assert '"turn_id": "t1"' in html.unescape(body) and f'/dashboard/traces/{trace_id}/' in body and "inspect →" in body
    inspect = (await client.get(f"/dashboard/events/{turn.id}/inspect/")).content.decode()
    assert "You are alice." in inspect and "Fix &lt;the&gt; bug" in inspect and "Done &amp; dusted" in inspect
    missing = await client.get("/dashboard/events/00000000-0000-0000-0000-000000000000/")
    assert missing.status_code == 404


async def test_the_company_page_lists_revisions_and_never_shows_a_secret_literal():
    company = parse_company(SECRET_DOC)
    await sync_to_async(store_revision)(SECRET_DOC, company, "token:founder", "api", 1)
    client = await signed_in(False)
    body = (await client.get("/dashboard/company/")).content.decode()
    assert "token:founder" in body and "[redacted]" in body
    assert "literally-the-secret" not in body


async def test_the_revision_admin_redacts_and_activates_through_the_running_node(node):
    company = parse_company(SECRET_DOC)
    row = await sync_to_async(store_revision)(SECRET_DOC, company, "token:founder", "api", None)
    activated = []

    async def activate_document(text, parsed, who, source="api"):
        activated.append((parsed.name, who, source))
        from engine.revisions import Activation
        return Activation(7, parsed.digest(), text, who, "", "")

    node.activate_document = activate_document
    client = await signed_in(True, node)
    change = (await client.get(f"/admin/engine/companyrevision/{row.pk}/change/")).content.decode()
    assert "[redacted]" in change and "literally-the-secret" not in change
    response = await client.post("/admin/engine/companyrevision/", {"action": "activate_revision", "_selected_action": [row.pk]})
    assert response.status_code == 302
    assert activated == [("nimbus", "root", "admin")]


async def test_the_seat_page_shows_the_seat_and_a_staff_user_pauses_and_resumes_it(node):
    viewer = await signed_in(False, node)
    page = await viewer.get("/dashboard/seats/alice/")
    assert page.status_code == 200 and b'data-handle="alice"' in page.content
    assert b'data-action="pause"' not in page.content  # no buttons for a non-staff user
    assert (await viewer.post("/dashboard/seats/alice/pause", {"reason": "x"})).status_code == 403

    staff = await signed_in(True, node, enforce_csrf_checks=True)
    page = await staff.get("/dashboard/seats/alice/")
    assert b'data-action="pause"' in page.content
    assert (await staff.post("/dashboard/seats/alice/pause", {"reason": "no token"})).status_code == 403  # CSRF
    token = staff.cookies["csrftoken"].value
    response = await staff.post("/dashboard/seats/alice/pause", {"reason": "review", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    from seats.pauses import PauseBook

    pause = await PauseBook(node.coord).get("alice")
    assert pause is not None and pause.reason == "review" and pause.paused_by == "root"
    await staff.post("/dashboard/seats/alice/resume", {"csrfmiddlewaretoken": token})
    assert await PauseBook(node.coord).get("alice") is None
    assert (await staff.get("/dashboard/seats/nobody/")).status_code == 404


async def test_the_admin_shows_which_seats_are_paused_from_the_coordination_store(node):
    from seats.pauses import PauseBook

    await PauseBook(node.coord).pause("bob", reason="too chatty", stop_running=False, paused_by="user:root")
    client = await signed_in(True, node)
    body = (await client.get("/admin/seats/pauses/")).content.decode()
    assert "bob" in body and "too chatty" in body


async def test_the_trace_box_opens_a_trace_from_its_id_its_first_characters_an_event_or_a_task(node):
    trace = "ab12cd34" + "0" * 24
    task = make_event("task_assigned", node.company, "alice", at=T0, trace_id=trace, task="ship it", task_id="5e0c7d0e-1111-4aaa-8bbb-123456789abc")
    twin_trace = "ab12cd35" + "f" * 24
    await sync_to_async(write_events)([task, make_event("org_started", at=T0, trace_id=twin_trace)])
    client = await signed_in(False, node)
    for text in (trace, trace[:8], str(task.id), task.get("task_id"), f"  {trace.upper()}  "):
        response = await client.get("/dashboard/traces/", {"q": text})
        assert response.status_code == 302 and response["Location"] == f"/dashboard/traces/{trace}/", text
    # A short id in the trace page's own address is resolved the same way.
    response = await client.get(f"/dashboard/traces/{trace[:8]}/")
    assert response.status_code == 302 and "q=ab12cd34" in response["Location"]
    ambiguous = await client.get("/dashboard/traces/", {"q": "ab12cd3"})
    body = ambiguous.content.decode()
    assert ambiguous.status_code == 200 and 'data-outcome="ambiguous"' in body and trace in body and twin_trace in body
    none = await client.get("/dashboard/traces/", {"q": "fedcba98"})
    assert none.status_code == 404 and 'data-outcome="none"' in none.content.decode()
    refused = await client.get("/dashboard/traces/", {"q": "'; drop table crewlet_events; --"})
    assert refused.status_code == 422 and "q: expected a trace id" in html.unescape(refused.content.decode())


async def test_a_staff_user_gives_a_seat_a_task_from_its_page_through_the_routes_function(node):
    viewer = await signed_in(False, node)
    page = (await viewer.get("/dashboard/seats/alice/")).content.decode()
    assert 'id="task-form"' not in page
    assert (await viewer.post("/dashboard/seats/alice/tasks", {"text": "x"})).status_code == 403

    staff = await signed_in(True, node, enforce_csrf_checks=True)
    page = (await staff.get("/dashboard/seats/alice/")).content.decode()
    assert 'id="task-form"' in page and 'action="/dashboard/seats/alice/tasks"' in page
    assert (await staff.post("/dashboard/seats/alice/tasks", {"text": "no token"})).status_code == 403  # CSRF
    token = staff.cookies["csrftoken"].value
    seen = []
    await node.queue.subscribe_stream(_subject(), _collect(seen))
    response = await staff.post("/dashboard/seats/alice/tasks", {"text": "Write the release notes", "csrfmiddlewaretoken": token},
                                headers={"Accept": "application/json"})
    assert response.status_code == 202
    answer = response.json()
    assert set(answer) == {"event_id", "task_id", "trace_id", "handle", "trace_url"}
    assert answer["trace_url"].endswith(f"/dashboard/traces/{answer['trace_id']}/")
    from tests.queue.waiting import eventually

    await eventually(lambda: seen, message="the task on the event stream")
    assert str(seen[0].id) == answer["event_id"] and seen[0].get("assigned_by") == "root"
    refused = await staff.post("/dashboard/seats/maya/tasks", {"text": "x", "csrfmiddlewaretoken": token},
                               headers={"Accept": "application/json"})
    assert refused.status_code == 422 and "human seat" in refused.json()["detail"]
    plain = await staff.post("/dashboard/seats/alice/tasks", {"text": "again", "csrfmiddlewaretoken": token})
    assert plain.status_code == 302 and plain["Location"] == "/dashboard/seats/alice/"


def _subject() -> str:
    from engine.queue import topics

    return topics.event_subject("task_assigned")


def _collect(into: list):
    async def handler(event):
        into.append(event)
    return handler


async def test_a_missing_page_is_answered_inside_the_layout_and_the_favicon_is_served(node, settings):
    settings.DEBUG = False
    client = await signed_in(False, node)
    missing = await client.get("/dashboard/seats/nobody/")
    body = missing.content.decode()
    assert missing.status_code == 404 and 'class="panel error-page"' in body and "dashboard.css" in body
    assert "is no seat of the company" in html.unescape(body)
    nowhere = await client.get("/no/such/page")
    assert nowhere.status_code == 404 and "error-page" in nowhere.content.decode()
    icon = await client.get("/favicon.ico")
    assert icon.status_code == 301 and icon["Location"] == "/static/dashboard/favicon.svg"
    assert (await client.get("/static/dashboard/favicon.svg")).status_code == 200


async def test_the_company_page_draws_the_org_chart_from_reports_to(node):
    client = await signed_in(False, node)
    body = (await client.get("/dashboard/company/")).content.decode()
    chart = body[body.index('id="org-chart"'):]
    maya = chart.index('data-seat="maya"')
    reports = chart.index('class="org-reports"', maya)
    assert maya < reports < chart.index('data-seat="alice"') < chart.index('data-seat="bob"')


SCHEDULED_DOC = """name: nimbus
timezone: Europe/Berlin
providers: {llm: [{name: local, kind: scripted}]}
org:
  seats:
    - {handle: maya, kind: human}
    - {handle: alice, kind: agent}
    - {handle: bob, kind: agent}
schedules:
  - {name: standup, seat: bob, cron: "0 9 * * 1-5", task: "Post the standup"}
"""


async def test_the_company_page_shows_each_schedule_with_its_next_fires_on_the_company_clock(node):
    node.company = parse_company(SCHEDULED_DOC)
    client = await signed_in(False, node)
    body = (await client.get("/dashboard/company/")).content.decode()
    row = re.search(r'<tr data-schedule="standup">(.*?)</tr>', body, re.S).group(1)
    assert "0 9 * * 1-5" in row and 'href="/dashboard/seats/bob/"' in row and "Post the standup" in row
    fires = re.findall(r'<time datetime="([^"]+)"', re.search(r'data-field="next">(.*?)</td>', row, re.S).group(1))
    assert len(fires) == 3 and all(datetime.fromisoformat(f).astimezone(node.company.tz).hour == 9 for f in fires)
    assert "no node holds the duty" in row and "Europe/Berlin" in body


async def test_the_seat_page_lists_the_seats_open_a2a_channels_with_their_trace(node):
    from a2a import service as a2a
    from events.tracing import trace_of

    node.company = parse_company(SCHEDULED_DOC)
    outcome = await a2a.ask(node, asker="alice", target="bob", brief="ready?", depth=0, trace=trace_of())
    assert outcome.ok
    client = await signed_in(False, node)
    asker = (await client.get("/dashboard/seats/alice/")).content.decode()
    item = re.search(rf'<li data-channel-id="{outcome.channel_id}">(.*?)</li>', asker, re.S).group(1)
    channel = await a2a.ChannelBook(node.coord).get(outcome.channel_id)
    assert "asked" in item and ">bob</a>" in item and f'/dashboard/traces/{channel.trace_id}/' in item
    answerer = (await client.get("/dashboard/seats/bob/")).content.decode()
    assert "asked by" in answerer and outcome.channel_id in answerer
