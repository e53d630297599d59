"""The seats over REST: reads with the read grant, writes with the admin grant, a task published
to the seat's inbox exactly as the scheduler would, refusals that name the handle."""
from __future__ import annotations

import json

import pytest

from engine.coord.leases import seat_key
from engine.coord.local import LocalCoord
from engine.queue import topics
from seats.budgets import Budgets
from seats.tasks import TaskRefused, build_task
from tests.conftest import ADMIN_TOKEN, READ_TOKEN
from tests.handover import NodeClient
from tests.queue.conftest import FAST, MemoryBackend
from tests.queue.waiting import eventually
from tests.seats.hosting import company, make_rig

pytestmark = pytest.mark.timeout(30)

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
READ = {"Authorization": f"Bearer {READ_TOKEN}"}


@pytest.fixture
async def served():
    """A seat runtime on the memory twin: the node every request of the test is handed."""
    backend = MemoryBackend(FAST)
    coord = LocalCoord()
    rig = await make_rig(backend, coord=coord)
    try:
        yield rig
    finally:
        await rig.runtime.stop(cut=True)
        await backend.close()


async def _call(rig, method: str, path: str, headers: dict, body: dict | None = None):
    """One request, handed `rig`'s node as the node's ASGI layer hands it (None: no node)."""
    client = NodeClient(rig.node if rig is not None else None)
    kwargs = {"headers": headers}
    if body is not None:
        kwargs.update(data=json.dumps(body), content_type="application/json")
    response = await getattr(client, method)(path, **kwargs)
    return response.status_code, response.json()


async def test_every_seat_is_listed_with_its_holder_state_and_mailbox_depth(served):
    lease = await served.node.leases.acquire(seat_key("alice"))
    await served.runtime.on_seat_acquired("alice", lease)
    await served.queue.publish(topics.agent_inbox("bob"), build_task(served.node.company, "bob", "waiting", "test"))
    status, body = await _call(served, "get", "/seats", READ)
    assert status == 200
    seats = {s["handle"]: s for s in body["items"]}
    assert set(seats) == {"maya", "alice", "bob", "carol"}
    assert seats["maya"]["kind"] == "human" and seats["maya"]["state"] is None
    assert seats["alice"]["holder"] == "node-a" and seats["alice"]["state"] == "idle"
    assert seats["bob"]["state"] == "unplaced" and seats["bob"]["mailbox_depth"] == 1
    status, one = await _call(served, "get", "/seats/alice", READ)
    assert status == 200 and one["agent_id"] == seats["alice"]["agent_id"]


async def test_an_unknown_seat_is_a_404_naming_it(served):
    status, body = await _call(served, "get", "/seats/zed", READ)
    assert status == 404 and "'zed'" in body["detail"]


async def test_a_task_reaches_the_seats_inbox_and_answers_202_with_its_event_id(served):
    await served.runtime.on_seat_acquired("alice", None)
    status, body = await _call(served, "post", "/seats/alice/tasks", ADMIN, {"text": "Write the release notes"})
    assert status == 202
    await eventually(lambda: served.turns.outcomes == ["completed"], message="the task's turn")
    trigger = served.turns.requests[0].trigger
    assert str(trigger.id) == body["event_id"]
    assert trigger.type == "task_assigned" and trigger.get("task") == "Write the release notes"
    assert trigger.get("assigned_by") == "admin"


async def test_a_task_for_a_human_or_an_unknown_seat_is_refused_by_name(served):
    status, body = await _call(served, "post", "/seats/maya/tasks", ADMIN, {"text": "hello"})
    assert status == 422 and "'maya'" in body["detail"]
    status, body = await _call(served, "post", "/seats/zed/tasks", ADMIN, {"text": "hello"})
    assert status == 404 and "'zed'" in body["detail"]
    status, body = await _call(served, "post", "/seats/alice/tasks", ADMIN, {"text": "   "})
    assert status == 422 and body["detail"].startswith("text:")
    with pytest.raises(TaskRefused) as refused:
        build_task(company(), "maya", "hello", "test")
    assert refused.value.status == 422


async def test_writes_need_the_admin_grant_and_reads_the_read_grant(served):
    status, body = await _call(served, "post", "/seats/alice/pause", READ, {"reason": "x"})
    assert status == 403 and "admin" in body["detail"]
    status, body = await _call(served, "post", "/seats/alice/tasks", READ, {"text": "x"})
    assert status == 403
    status, body = await _call(served, "get", "/seats", {})
    assert status == 401 and "Authorization" in body["detail"]


async def test_pause_and_resume_over_rest_hold_and_release_the_seat(served):
    await served.runtime.on_seat_acquired("alice", None)
    status, body = await _call(served, "post", "/seats/alice/pause", ADMIN, {"reason": "audit", "stop_running": False})
    assert status == 200 and body["changed"] is True and body["paused"]["paused_by"] == "admin"
    status, body = await _call(served, "post", "/seats/alice/pause", ADMIN, {"reason": "audit"})
    assert status == 200 and body["changed"] is False
    await eventually(lambda: served.host().state == "paused", message="the host to hold the inbox")
    status, seat = await _call(served, "get", "/seats/alice", READ)
    assert seat["state"] == "paused" and "paused" in seat["holds"] and seat["paused"]["reason"] == "audit"
    status, body = await _call(served, "post", "/seats/alice/resume", ADMIN)
    assert status == 200 and body["changed"] is True
    await eventually(lambda: served.host().state == "idle", message="the hold to lift")
    status, body = await _call(served, "post", "/seats/maya/pause", ADMIN, {"reason": "x"})
    assert status == 422 and "'maya'" in body["detail"]


async def test_budgets_show_every_scope(served):
    the_company = served.node.company
    await Budgets(served.node.coord).charge(the_company, the_company.seat_by_handle("alice"), 42)
    status, body = await _call(served, "get", "/budgets", READ)
    assert status == 200
    assert body["company"]["day"]["spend"] == 42 and body["seats"]["alice"]["day"]["spend"] == 42


async def test_without_a_running_node_the_routes_answer_503():
    status, body = await _call(None, "get", "/seats", READ)
    assert status == 503 and "no node" in body["detail"]


def test_an_action_is_recorded_under_the_tokens_seat_and_summarised_by_its_handle():
    from engine.config import parse_company
    from engine.config.tokens import Caller
    from seats.queries import actor_seat

    company = parse_company("name: nimbus\norg:\n  seats:\n    - {handle: maya, kind: human}\n    - {handle: alice, kind: agent}\n")
    assert str(Caller("founder", "maya")) == "maya" and str(Caller("founder")) == "founder"
    assert actor_seat(company, "maya") == "maya"
    assert actor_seat(company, "nobody") == "" and actor_seat(company, "") == ""  # a seat the company lacks is not claimed
    task = build_task(company, "alice", "Write the release notes", "founder", assigned_by_seat="maya")
    assert task.summary() == "maya assigned alice: Write the release notes"
    bare = build_task(company, "alice", "Write the release notes", "founder")
    assert bare.summary() == "founder assigned alice: Write the release notes"
    assert "token:" not in task.summary() + bare.summary()
