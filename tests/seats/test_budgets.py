"""Token budgets (seed 002, "Token Budgets"): windows cut on the company's clock, seat and
company ceilings, the refused round counted, rollover without a reset, the snapshot GET /budgets
serves. The counters run on the in-process coordination twin with a stepped clock (one case on
a real nats-server's KV, as a fleet keeps them)."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
import yaml

from engine.config.company import Company, parse_company
from engine.coord.contract import Unavailable
from engine.coord.local import LocalCoord
from seats.budgets import BUDGETS_BUCKET, TTL_GRACE_SECONDS, Budgets, Refusal, next_reset, window_for

pytestmark = pytest.mark.timeout(30)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


class Clock:
    """Seconds since the epoch, moved only by the test."""

    def __init__(self, at: str) -> None:
        self.now = utc(at).timestamp()

    def __call__(self) -> float:
        return self.now

    def set(self, at: str) -> None:
        self.now = utc(at).timestamp()


def company(*, tz: str = "America/New_York", company_budget: dict | None = None,
            alice: dict | None = None, bob: dict | None = None) -> Company:
    doc = {"name": "acme", "timezone": tz,
           "org": {"seats": [{"handle": "maya", "kind": "human"},
                             {"handle": "alice", "kind": "agent", "token_budget": alice or {}},
                             {"handle": "bob", "kind": "agent", "token_budget": bob or {}}]}}
    if company_budget:
        doc["token_budget"] = company_budget
    return parse_company(yaml.safe_dump(doc), env={})


def rig(at: str) -> tuple[Budgets, LocalCoord, Clock]:
    clock = Clock(at)
    coord = LocalCoord(clock=clock)
    return Budgets(coord, clock=clock), coord, clock


def test_windows_are_cut_on_the_companys_clock_with_weeks_from_monday():
    # 03:00 UTC on Sunday 29 Nov is still Saturday evening in New York
    now, ny = utc("2026-11-29T03:00:00").timestamp(), company().tz
    day, week, month = (window_for(p, now, ny) for p in ("day", "week", "month"))
    assert (day.label, day.resets_at) == ("2026-11-28", utc("2026-11-29T05:00:00"))
    assert (week.label, week.starts_at, week.resets_at) == ("2026-W48", utc("2026-11-23T05:00:00"), utc("2026-11-30T05:00:00"))
    assert (month.label, month.resets_at) == ("2026-11", utc("2026-12-01T05:00:00"))
    december = window_for("month", utc("2026-12-31T12:00:00").timestamp(), company(tz="UTC").tz)
    assert (december.label, december.resets_at) == ("2026-12", utc("2027-01-01T00:00:00"))


async def test_a_seat_ceiling_refuses_the_round_that_crosses_it_and_counts_it_all_the_same():
    budgets, _, _ = rig("2026-11-28T15:00:00")
    acme = company(alice={"day": 100})
    alice, bob = acme.seat_by_handle("alice"), acme.seat_by_handle("bob")
    assert await budgets.charge(acme, alice, 60) is None
    refusal = await budgets.charge(acme, alice, 50)
    assert refusal == Refusal(scope="seat", handle="alice", period="day", window="2026-11-28",
                              spend=110, ceiling=100, resets_at=utc("2026-11-29T05:00:00"))
    assert await budgets.check(acme, alice) == refusal  # every later round is refused against 110
    assert await budgets.check(acme, bob) is None       # another seat's ceiling is its own
    assert next_reset(refusal) == utc("2026-11-29T05:00:00")


async def test_a_company_ceiling_is_shared_by_every_seat():
    budgets, _, _ = rig("2026-11-28T15:00:00")
    acme = company(company_budget={"week": 150})
    alice, bob = acme.seat_by_handle("alice"), acme.seat_by_handle("bob")
    assert await budgets.charge(acme, alice, 100) is None
    refusal = await budgets.charge(acme, bob, 60)
    assert (refusal.scope, refusal.handle, refusal.period, refusal.window, refusal.spend, refusal.ceiling) == \
        ("company", "", "week", "2026-W48", 160, 150)
    assert (await budgets.check(acme, alice)).scope == "company"


async def test_a_window_filled_exactly_admits_that_round_and_turns_the_next_away():
    budgets, _, _ = rig("2026-11-28T15:00:00")
    acme = company(alice={"day": 100})
    alice = acme.seat_by_handle("alice")
    assert await budgets.check(acme, alice) is None
    assert await budgets.charge(acme, alice, 100) is None
    refusal = await budgets.check(acme, alice)
    assert (refusal.spend, refusal.ceiling) == (100, 100)


async def test_the_allowance_comes_back_when_the_window_turns_over_at_local_midnight():
    budgets, _, clock = rig("2026-11-29T04:50:00")  # 23:50 on the 28th in New York
    acme = company(alice={"day": 100, "week": 1000})
    alice = acme.seat_by_handle("alice")
    refusal = await budgets.charge(acme, alice, 150)
    assert (refusal.period, refusal.window) == ("day", "2026-11-28")
    clock.set("2026-11-29T04:59:59")
    assert await budgets.check(acme, alice) is not None
    clock.set("2026-11-29T05:00:00")  # midnight there: a new day, the same week
    assert await budgets.check(acme, alice) is None
    assert await budgets.charge(acme, alice, 10) is None
    shown = (await budgets.snapshot(acme))["seats"]["alice"]
    assert (shown["day"]["window"], shown["day"]["spend"]) == ("2026-11-29", 10)
    assert (shown["week"]["window"], shown["week"]["spend"]) == ("2026-W48", 160)


async def test_where_several_windows_refuse_the_one_that_turns_over_last_is_named():
    budgets, _, _ = rig("2026-11-28T15:00:00")
    acme = company(company_budget={"day": 50}, alice={"month": 50})
    alice = acme.seat_by_handle("alice")
    refusal = await budgets.charge(acme, alice, 80)
    assert (refusal.scope, refusal.period, refusal.resets_at) == ("seat", "month", utc("2026-12-01T05:00:00"))


async def test_counters_are_keyed_per_scope_and_window_and_age_out_after_their_window():
    budgets, coord, clock = rig("2026-11-28T15:00:00")
    acme = company()
    await budgets.charge(acme, acme.seat_by_handle("alice"), 5)
    assert await coord.keys(BUDGETS_BUCKET) == [
        "company:day:2026-11-28", "company:month:2026-11", "company:week:2026-W48",
        "seat:alice:day:2026-11-28", "seat:alice:month:2026-11", "seat:alice:week:2026-W48"]
    clock.now = utc("2026-11-29T05:00:00").timestamp() + TTL_GRACE_SECONDS + 1
    assert "company:day:2026-11-28" not in await coord.keys(BUDGETS_BUCKET)
    assert "company:week:2026-W48" in await coord.keys(BUDGETS_BUCKET)


async def test_concurrent_charges_are_all_counted():
    budgets, _, _ = rig("2026-11-28T15:00:00")
    acme = company()
    await asyncio.gather(*(budgets.charge(acme, acme.seat_by_handle(h), 5) for h in ("alice", "bob") * 10))
    shown = await budgets.snapshot(acme)
    assert shown["company"]["day"]["spend"] == 100
    assert shown["seats"]["alice"]["month"]["spend"] == shown["seats"]["bob"]["month"]["spend"] == 50


async def test_two_nodes_charging_the_same_counters_in_turn_count_every_round():
    # each node writes against the revision it last wrote, which the other has moved on
    clock = Clock("2026-11-28T15:00:00")
    coord = LocalCoord(clock=clock)
    node_a, node_b = Budgets(coord, clock=clock), Budgets(coord, clock=clock)
    acme = company(company_budget={"day": 100})
    alice = acme.seat_by_handle("alice")
    for node in (node_a, node_a, node_b, node_a, node_b, node_b, node_a):
        assert await node.charge(acme, alice, 10) is None
    refusal = await node_b.charge(acme, alice, 40)
    assert (refusal.scope, refusal.spend, refusal.ceiling) == ("company", 110, 100)
    shown = await node_a.snapshot(acme)
    assert shown["company"]["month"]["spend"] == shown["seats"]["alice"]["week"]["spend"] == 110
    await asyncio.gather(*(node.charge(acme, alice, 5) for node in (node_a, node_b) * 5))
    assert (await node_b.snapshot(acme))["seats"]["alice"]["day"]["spend"] == 160


async def test_a_counter_gone_from_the_store_is_counted_again_from_the_next_round():
    budgets, coord, _ = rig("2026-11-28T15:00:00")
    acme = company()
    alice = acme.seat_by_handle("alice")
    await budgets.charge(acme, alice, 30)
    for key in await coord.keys(BUDGETS_BUCKET):
        await coord.delete(BUDGETS_BUCKET, key)
    assert await budgets.charge(acme, alice, 7) is None
    shown = await budgets.snapshot(acme)
    assert shown["company"]["day"]["spend"] == shown["seats"]["alice"]["month"]["spend"] == 7


class SeatCountersDown(LocalCoord):
    """The coordination twin refusing writes to the seats' counters (the company's land)."""

    async def update(self, bucket, key, value, expected_revision, ttl=None):
        if key.startswith("seat:"):
            raise Unavailable(f"coord: {bucket}: the broker did not answer (TimeoutError)")
        return await super().update(bucket, key, value, expected_revision, ttl=ttl)


async def test_a_seat_write_that_fails_after_the_companys_landed_leaves_the_round_on_the_company(caplog):
    clock = Clock("2026-11-28T15:00:00")
    coord = SeatCountersDown(clock=clock)
    budgets = Budgets(coord, clock=clock)
    acme = company()
    alice = acme.seat_by_handle("alice")
    await budgets.charge(acme, alice, 10)  # the seat's counters are created, then refuse every update
    with pytest.raises(Unavailable):
        await budgets.charge(acme, alice, 25)
    shown = await budgets.snapshot(acme)
    assert [shown["company"][p]["spend"] for p in ("day", "week", "month")] == [35, 35, 35]
    assert [shown["seats"]["alice"][p]["spend"] for p in ("day", "week", "month")] == [10, 10, 10]
    uncounted = sorted(r.period for r in caplog.records if r.getMessage() == "coord_kv_budget_spend_uncounted")
    assert uncounted == ["day", "month", "week"]


async def test_the_snapshot_shows_every_scope_capped_or_not_with_its_state():
    budgets, _, _ = rig("2026-11-28T15:00:00")
    acme = company(alice={"day": 10})
    await budgets.charge(acme, acme.seat_by_handle("alice"), 30)
    shown = await budgets.snapshot(acme)
    assert set(shown["seats"]) == {"alice", "bob"}  # agent seats; a person has no budget
    assert shown["company"]["day"] == {"window": "2026-11-28", "spend": 30, "ceiling": None, "state": "uncapped",
                                       "resets_at": "2026-11-29T05:00:00+00:00", "refused_at": None}
    day = shown["seats"]["alice"]["day"]
    assert (day["spend"], day["ceiling"], day["state"]) == (30, 10, "refusing")
    assert day["refused_at"] == "2026-11-28T15:00:00+00:00"
    assert shown["seats"]["bob"]["week"]["spend"] == 0


async def test_a_store_that_does_not_answer_is_an_outage_not_a_refusal():
    budgets, coord, _ = rig("2026-11-28T15:00:00")
    acme = company(alice={"day": 10})
    await coord.close()
    with pytest.raises(Unavailable):
        await budgets.check(acme, acme.seat_by_handle("alice"))
    with pytest.raises(Unavailable):
        await budgets.charge(acme, acme.seat_by_handle("alice"), 5)


async def test_on_the_fleets_kv_two_nodes_charge_one_counter(tmp_path):
    from tests.coord.conftest import NatsBackend

    backend = NatsBackend(tmp_path / "stream")
    await backend.start()
    try:
        acme = company(tz="UTC", company_budget={"day": 100})
        node_a, node_b = Budgets(await backend.store("node-a")), Budgets(await backend.store("node-b"))
        alice, bob = acme.seat_by_handle("alice"), acme.seat_by_handle("bob")
        assert await node_a.charge(acme, alice, 60) is None
        refusal = await node_b.charge(acme, bob, 60)
        assert (refusal.scope, refusal.spend, refusal.ceiling) == ("company", 120, 100)
        assert (await node_a.check(acme, alice)).spend == 120
        assert (await node_b.snapshot(acme))["seats"]["alice"]["day"]["spend"] == 60
    finally:
        await backend.close()
