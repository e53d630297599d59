"""`api.auth.admin: refuse` (seed 002, "Running the Engine + API": `admin: serve | refuse`): a
real node started with it serves reads and refuses every admin route -- each REST write, every
/admin/ page, the dashboard's controls -- with a 403 naming the setting, whatever the
credential, and its start banner does not advertise them."""
from __future__ import annotations

import json

import pytest

from tests.node.harness import ADMIN, READER, NodeProcess, eventually
from tests.security.conftest import Session, make_user, no_traceback

pytestmark = pytest.mark.timeout(120)

SETTING = "api.auth.admin"
WRITES = (
    ("POST", "/seats/alice/pause", {"reason": "review"}),
    ("POST", "/seats/alice/resume", {}),
    ("POST", "/seats/alice/tasks", {"text": "write the notes"}),
    ("POST", "/schedules/nightly/fire", {}),
    ("POST", "/a2a/ask", {"from": "alice", "to": "bob", "question": "status?"}),
)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    made = NodeProcess(home=tmp_path_factory.mktemp("refusing") / "node-1")
    made.start(admin="refuse")
    made.wait_ready()
    try:
        yield made
    finally:
        made.stop()


def test_every_api_write_is_a_403_naming_the_setting_and_reads_are_served(node):
    for method, path, body in WRITES:
        status, answer, _ = node.post(path, body, token=ADMIN)
        assert status == 403 and SETTING in answer["detail"], (method, path, status, answer)
    status, answer, _ = node.put("/config", b"name: nimbus\n", token=ADMIN)
    assert status == 403 and SETTING in answer["detail"], answer
    for token in (ADMIN, READER):
        assert node.get("/config", token)[0] == 200
        assert node.get("/seats/alice", token)[0] == 200
    status, seat, _ = node.get("/seats/alice", READER)
    assert seat["paused"] is None  # nothing the refused writes asked for happened
    status, events, _ = node.get("/events?type=task_assigned", READER)
    assert events["items"] == []
    no_traceback(node)


def test_every_admin_page_is_a_403_naming_the_setting_before_any_sign_in(node):
    for path in ("/admin/", "/admin/login/", "/admin/engine/companyrevision/", "/admin/seats/pauses/"):
        status, _, text = Session(node.base).request("GET", path)
        assert status == 403 and SETTING in text, (path, status, text[:300])
    status, _, text = Session(node.base).request("POST", "/admin/login/", {"username": "x", "password": "y"})
    assert status == 403 and SETTING in text


def test_the_dashboard_hides_its_controls_and_refuses_their_posts_for_a_staff_user(node):
    make_user(node, "maya", "a-maya-password-0123")
    session = Session(node.base)
    assert session.sign_in("maya", "a-maya-password-0123")[0] == 302
    eventually(lambda: session.request("GET", "/dashboard/seats/alice/")[0] == 200, 30, "the seat page", node)
    status, _, page = session.request("GET", "/dashboard/seats/alice/")
    assert 'id="task-form"' not in page and 'data-action="pause"' not in page and 'href="/admin/"' not in page
    status, _, overview = session.request("GET", "/dashboard/")
    assert status == 200 and "/admin/" not in overview
    token = session.cookie("csrftoken")
    for path in ("/dashboard/seats/alice/pause", "/dashboard/seats/alice/resume", "/dashboard/seats/alice/tasks"):
        status, _, text = session.request("POST", path, {"csrfmiddlewaretoken": token, "text": "x"},
                                          headers={"Referer": node.base + "/dashboard/seats/alice/"})
        assert status == 403 and SETTING in text, (path, status, text[:300])
    status, _, text = session.request("POST", "/dashboard/seats/alice/tasks", {"csrfmiddlewaretoken": token, "text": "x"},
                                      headers={"Referer": node.base + "/dashboard/seats/alice/", "Accept": "application/json"})
    assert status == 403 and SETTING in json.loads(text)["detail"]


def test_the_start_banner_does_not_advertise_the_admin(node):
    banner = node.log_text()
    assert "refused on this node (api.auth.admin: refuse)" in banner
    assert f"{node.base}/admin/" not in banner
