"""budget_meters (seed 000, "Event Types"; seed 002, the exclusions table: "published by every
node on a 15-second tick and at once when a budget window first refuses a charge"), on both
queue backends with the coordination twin; the tick is a setting, so a test runs it in
milliseconds."""
from __future__ import annotations

import pytest
import yaml

from engine.config.company import parse_company
from engine.coord.local import LocalCoord
from engine.node.process import NodeTimings
from engine.node.services import build_services
from seats.meters import BudgetMetersPublisher
from tests.queue.waiting import eventually, throughout
from tests.seats.hosting import FakeNode, Published, backend  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(60)


def capped(*, alice_day: int | None = 100, company_month: int | None = 1000):
    alice = {"handle": "alice", "kind": "agent", "role": "engineer"}
    if alice_day is not None:
        alice["token_budget"] = {"day": alice_day}
    doc = {"name": "nimbus", "org": {"seats": [{"handle": "maya", "kind": "human"}, alice,
                                               {"handle": "bob", "kind": "agent", "role": "engineer"}]}}
    if company_month is not None:
        doc["token_budget"] = {"month": company_month}
    return parse_company(yaml.safe_dump(doc), env={})


def meters(published: Published) -> list:
    return [e for e in published.events if e.type == "budget_meters"]


def window(report, scope: str, period: str, handle: str = "") -> dict:
    return next(w for w in report.get("windows") if (w["scope"], w["agent_handle"], w["period"]) == (scope, handle, period))


async def test_a_tick_reports_every_capped_window_with_its_state_and_no_uncapped_one(backend):  # noqa: F811
    queue = await backend.client("node-a")
    published = Published(queue)
    company = capped()
    node = FakeNode(queue=queue, coord=LocalCoord(), company=company)
    await node.budgets.charge(company, company.seat_by_handle("alice"), 40)
    publisher = BudgetMetersPublisher(node, tick_seconds=0.05)
    await publisher.start()
    try:
        await eventually(lambda: len(meters(published)) >= 2, message="two ticks")
    finally:
        await publisher.stop(cut=False)
    report = meters(published)[-1]
    assert report.get("reason") == "tick" and report.get("taken_at") is not None
    # Only capped windows: the company's month and alice's day; bob and the other periods are uncapped.
    assert sorted((w["scope"], w["agent_handle"], w["period"]) for w in report.get("windows")) == \
        [("company", "", "month"), ("seat", "alice", "day")]
    alice = window(report, "seat", "day", "alice")
    assert (alice["spend"], alice["ceiling"], alice["state"]) == (40, 100, "open")
    assert window(report, "company", "month")["spend"] == 40


async def test_a_company_that_caps_nothing_publishes_no_meters(backend):  # noqa: F811
    queue = await backend.client("node-a")
    published = Published(queue)
    node = FakeNode(queue=queue, coord=LocalCoord(), company=capped(alice_day=None, company_month=None))
    publisher = BudgetMetersPublisher(node, tick_seconds=0.05)
    await publisher.start()
    try:
        await throughout(lambda: not meters(published), window=0.3, message="no budget_meters")
    finally:
        await publisher.stop(cut=False)


async def test_a_window_that_first_refuses_is_reported_at_once_and_again_only_after_it_reopened(backend):  # noqa: F811
    queue = await backend.client("node-a")
    published = Published(queue)
    company = capped()
    alice = company.seat_by_handle("alice")
    # The node's counters: the publisher hears the refusals of the budgets the seat hosts charge.
    node = FakeNode(queue=queue, coord=LocalCoord(), company=company)
    publisher = BudgetMetersPublisher(node)  # the seed's 15 s tick: only refusals report after the first
    assert publisher.tick_seconds == 15  # seed 002, "Token budgets": "on a 15-second tick"
    await publisher.start()
    try:
        await eventually(lambda: len(meters(published)) == 1, message="the first tick")
        assert await node.budgets.charge(company, alice, 150) is not None  # the round that crossed the ceiling
        await eventually(lambda: len(meters(published)) == 2, message="the refusal's report")
        report = meters(published)[-1]
        assert report.get("reason") == "refusal"
        assert window(report, "seat", "day", "alice")["state"] == "refusing"
        # The same window refusing again is not a first: no report until the tick.
        assert await node.budgets.check(company, alice) is not None
        await throughout(lambda: len(meters(published)) == 2, window=0.3, message="no second refusal report")
        # A revision raises the ceiling: the next report finds the window open, so when a lower
        # ceiling makes it refuse again, that refusal is reported at once.
        node.company = capped(alice_day=10_000)
        await publisher.publish("tick")
        node.company = company
        assert await node.budgets.check(company, alice) is not None
        await eventually(lambda: [e.get("reason") for e in meters(published)][-1:] == ["refusal"] and
                         len(meters(published)) == 4, message="the reopened window's refusal reported")
    finally:
        await publisher.stop(cut=False)


def test_every_role_runs_the_publisher():
    for role in ("data", "seats", "ingress", "workers"):
        node = FakeNode(queue=None, coord=LocalCoord(), company=None, node_id="n")
        node.roles, node.timings, node.env = (role,), NodeTimings(), {}
        names = [type(s).__name__ for s in build_services(node).started_in_order()]
        assert "BudgetMetersPublisher" in names, (role, names)


def test_the_workers_role_runs_the_scheduler_and_the_maintenance_duty_and_tests_alone_shorten_them():
    from engine.node.services import MAINTENANCE_ENV, SCHEDULER_ENV, duty_timings

    node = FakeNode(queue=None, coord=LocalCoord(), company=None, node_id="n")
    node.roles, node.timings, node.env = ("workers",), NodeTimings(), {}
    services = build_services(node)
    assert services.scheduler is not None and services.maintenance is not None
    assert (services.scheduler.tick_seconds, services.maintenance.a2a_idle, services.maintenance.a2a_retain) == (1.0, 3600.0, 604800.0)
    node.roles = ("seats",)
    assert build_services(node).scheduler is None
    assert duty_timings({"CREWLET_A2A_IDLE_CLOSE_SECONDS": "2"}, MAINTENANCE_ENV) == {"a2a_idle_seconds": 2.0}
    assert duty_timings({"CREWLET_SCHEDULER_TICK_SECONDS": "soon"}, SCHEDULER_ENV) == {}  # not a number: the default
