"""A host that may not work its mail now defers it, and works it once it may (seats/host.py,
`_fetch_when_servable`; seed 000, DEFER: "returned at once, at the head, and the subscription
quiesces itself"):
- a lease renewal overdue, found by the host or by the turn engine's fence (seed 002, "Leases": a node acts on a seat only while its lease is
  proven exclusive). A renewal is late when the store is slow to answer -- a broker member
  electing a leader, a loaded machine -- and lands inside the TTL: the seat is still this
  node's, so its mail must not wait for a restart;
- a coordination store that does not answer: deferred at spacings that double, since each
  DEFER costs the mail one of its 25 deliveries.
Both queue backends.
"""
from __future__ import annotations

import logging

import pytest

from engine.coord.contract import Unavailable
from engine.coord.leases import seat_key
from engine.coord.ledger import LEDGER_BUCKET, CompletionLedger
from engine.coord.local import LocalCoord
from seats.budgets import Budgets
from seats import host as host_module
from seats.host import STORE_RETRY_MAX_SECONDS
from tests.queue.waiting import eventually, throughout
from tests.seats.hosting import backend, company, mail, make_rig  # noqa: F401  (fixtures)

pytestmark = pytest.mark.timeout(60)


def _deferrals(caplog) -> int:
    return sum(1 for r in caplog.records if r.getMessage() == "seat_not_exclusive")


async def test_mail_deferred_while_a_renewal_was_overdue_is_worked_once_the_renewal_lands(backend, caplog):
    caplog.set_level(logging.WARNING, logger="seats.host")
    rig = await make_rig(backend)
    try:
        lease = await rig.node.leases.acquire(seat_key("alice"))
        await rig.runtime.on_seat_acquired("alice", lease)
        await eventually(lambda: "alice" in rig.runtime.hosts, message="alice hosted")
        lease.last_renewed -= lease.ttl  # the last renewal is a TTL old: not exclusive now
        await rig.publish(mail("sent while the renewal was overdue", key="slack:C1:1"))
        await eventually(lambda: _deferrals(caplog) == 1, message="the host to defer the mail it may not work")
        # While the lease stays unproven the host waits for it, not redelivering the mail to
        # itself: each DEFER costs one of the mail's 25 deliveries.
        await throughout(lambda: _deferrals(caplog) == 1 and not rig.turns.requests, 1.0,
                         "one deferral, no turn, while the lease is unproven")
        assert await rig.node.leases.renew(lease) and lease.is_exclusive(rig.host().clock())
        await eventually(lambda: rig.turns.turns_of() == [["sent while the renewal was overdue"]],
                         message="the deferred mail worked once the renewal landed")

        async def settled() -> bool:
            return await rig.pending() == 0

        await eventually(settled, message="the mail acknowledged")
    finally:
        await rig.runtime.stop(cut=True)


async def test_a_hold_lifted_while_a_renewal_is_overdue_lets_the_mail_run_once_the_renewal_lands(backend):
    # The budget park is the hold here: the deferral it left is undone by the lift, which cannot
    # fetch while the lease is unproven, so the host fetches once the renewal lands.
    tight = company(alice_budget={"day": 100})
    rig = await make_rig(backend, the_company=tight)
    try:
        await Budgets(rig.node.coord).charge(tight, tight.seat_by_handle("alice"), 150)
        lease = await rig.node.leases.acquire(seat_key("alice"))
        await rig.runtime.on_seat_acquired("alice", lease)
        await rig.publish(mail("costly"))
        await eventually(lambda: rig.host().state == "parked", message="the seat to park")
        lease.last_renewed -= lease.ttl
        await rig.node.apply(company(alice_budget={"day": 10_000}))  # the ceiling raised: the park lifts
        await eventually(lambda: rig.host().holds == frozenset(), message="the budget hold lifted")
        await throughout(lambda: not rig.turns.requests, 0.5, "no turn while the lease is unproven")
        assert await rig.node.leases.renew(lease)
        await eventually(lambda: rig.turns.outcomes == ["completed"], message="the parked mail run once the renewal landed")
    finally:
        await rig.runtime.stop(cut=True)


async def test_a_turn_fenced_by_an_overdue_renewal_runs_again_here_once_the_renewal_lands(backend):
    # The turn engine's fence ends a turn `interrupted` when the lease is unproven before a
    # round; the seat stayed this node's (the renewal landed late), so the mail runs again here.
    rig = await make_rig(backend)
    try:
        lease = await rig.node.leases.acquire(seat_key("alice"))
        ends = ["interrupted"]

        def decide(request):
            if ends:
                lease.last_renewed -= lease.ttl  # what the fence found: a renewal overdue
                return ends.pop()
            return "completed"

        rig.turns.decide = decide
        await rig.runtime.on_seat_acquired("alice", lease)
        await rig.publish(mail("fenced once", key="slack:C1:1"))
        await eventually(lambda: rig.turns.outcomes == ["interrupted"], message="the fenced turn")
        await throughout(lambda: rig.turns.outcomes == ["interrupted"], 0.5, "no turn while the lease is unproven")
        assert await rig.node.leases.renew(lease)
        await eventually(lambda: rig.turns.outcomes == ["interrupted", "completed"],
                         message="the mail run again here once the renewal landed")
        assert rig.turns.turns_of() == [["fenced once"], ["fenced once"]]
    finally:
        await rig.runtime.stop(cut=True)


async def test_a_host_whose_lease_was_lost_lets_go_of_the_seat_and_works_nothing(backend, caplog):
    caplog.set_level(logging.WARNING, logger="seats.host")
    rig = await make_rig(backend)
    try:
        lease = await rig.node.leases.acquire(seat_key("alice"))
        await rig.runtime.on_seat_acquired("alice", lease)
        await eventually(lambda: "alice" in rig.runtime.hosts, message="alice hosted")
        lease.last_renewed -= lease.ttl
        await rig.publish(mail("for whoever holds the seat next", key="slack:C1:1"))
        await eventually(lambda: _deferrals(caplog) == 1, message="the host to defer the mail")
        lease.lost = True  # the store gave the seat to a peer: the renewal never lands
        await rig.runtime.on_seat_released("alice", lease, "lease lost")
        await throughout(lambda: not rig.turns.requests, 1.0, "no turn on a seat this node lost")
        assert await rig.pending() == 1  # the mail waits on the broker for the seat's next holder
    finally:
        await rig.runtime.stop(cut=True)


class LedgerOutage(LocalCoord):
    """The coordination twin, its completion ledger unanswering while `down` is set (what a
    client sees while the KV's stream elects a leader)."""

    down = False

    async def get(self, bucket: str, key: str):
        if self.down and bucket == LEDGER_BUCKET:
            raise Unavailable(f"coord: {bucket}: the broker did not answer (TimeoutError)")
        return await super().get(bucket, key)


class LedgerWriteOutage(LocalCoord):
    """The coordination twin, leaving the next `unanswered` ledger writes unanswered (reads answer)."""

    unanswered = 0

    async def create(self, bucket: str, key: str, value: bytes, ttl: float | None = None) -> int:
        if self.unanswered and bucket == LEDGER_BUCKET:
            self.unanswered -= 1
            raise Unavailable(f"coord: {bucket}: the broker did not answer (TimeoutError)")
        return await super().create(bucket, key, value, ttl)


async def test_a_ledger_record_the_store_did_not_answer_is_asked_again_and_written(backend, caplog):
    # What the ledger is for: the record must land even when the first write goes unanswered
    # (a broker member gone under the connection), or a redelivery would run the turn again.
    caplog.set_level(logging.ERROR, logger="seats.host")
    coord = LedgerWriteOutage()
    coord.unanswered = 1
    rig = await make_rig(backend, coord=coord)
    try:
        sent = mail("worked across a blip", key="slack:C1:1")
        await rig.publish(sent)
        await rig.runtime.on_seat_acquired("alice", None)
        ledger = CompletionLedger(coord)
        record = await eventually(lambda: ledger.worked("alice", str(sent.id)), 10, "the record written on the second ask")
        assert record.turn_id == rig.turns.requests[0].turn_id and coord.unanswered == 0
        assert not [r for r in caplog.records if r.getMessage() == "ledger_record_failed"]
    finally:
        await rig.runtime.stop(cut=True)


async def test_a_ledger_record_that_cannot_be_written_is_logged_and_the_completed_turns_mail_still_acked(
        backend, caplog, monkeypatch):
    # The ledger covers an ACK that never lands; when the ledger is what fails, the ACK is what
    # settles the mail. A completed turn is never run again because its record could not be
    # written: asked again for LEDGER_RETRY_SECONDS (15 s; shortened here), then logged.
    assert host_module.LEDGER_RETRY_SECONDS == 15.0
    monkeypatch.setattr(host_module, "LEDGER_RETRY_SECONDS", 1.5)
    caplog.set_level(logging.ERROR, logger="seats.host")
    coord = LedgerWriteOutage()
    coord.unanswered = 10**6
    rig = await make_rig(backend, coord=coord)
    try:
        await rig.publish(mail("worked while the ledger is down", key="slack:C1:1"))
        await rig.runtime.on_seat_acquired("alice", None)
        failed = await eventually(lambda: [r for r in caplog.records if r.getMessage() == "ledger_record_failed"], 20,
                                  "the ledger write given up and logged")
        assert failed[0].turn_id == rig.turns.requests[0].turn_id

        async def settled() -> bool:
            return await rig.pending() == 0

        await eventually(settled, message="the completed turn's mail acknowledged")
        await throughout(lambda: rig.turns.outcomes == ["completed"], 1.0, "the turn run once")
    finally:
        await rig.runtime.stop(cut=True)


async def test_a_store_outage_spaces_its_deferrals_out_doubling_and_the_mail_runs_when_it_answers(backend, caplog):
    caplog.set_level(logging.WARNING, logger="seats.host")
    coord = LedgerOutage()
    coord.down = True
    rig = await make_rig(backend, coord=coord)
    try:
        await rig.publish(mail("sent during the outage", key="slack:C1:1"))
        await rig.runtime.on_seat_acquired("alice", None)

        def spacings() -> list[float]:
            return [r.retry_seconds for r in caplog.records if r.getMessage() == "seat_store_unavailable"]

        # Every DEFER costs the mail one of its 25 deliveries: a retry each second would
        # dead-letter it after a 25-second outage; doubling (capped at 15 s) takes minutes.
        await eventually(lambda: len(spacings()) >= 3, 20, "three deferrals during the outage")
        assert spacings()[:3] == [1.0, 2.0, 4.0]
        assert STORE_RETRY_MAX_SECONDS == 15.0
        assert not rig.turns.requests
        coord.down = False
        await eventually(lambda: rig.turns.turns_of() == [["sent during the outage"]], 20,
                         "the mail worked once the store answered")
        # the store answered: the next outage's spacing starts again at a second
        coord.down = True
        await rig.publish(mail("sent during the next outage", key="slack:C1:2"))
        await eventually(lambda: len(spacings()) >= 4, 20, "a deferral in the next outage")
        assert spacings()[3] == 1.0
        coord.down = False
        await eventually(lambda: len(rig.turns.requests) == 2, 20, "the next mail worked once the store answered")
    finally:
        await rig.runtime.stop(cut=True)


async def test_the_fence_a_turn_is_handed_says_held_while_the_lease_is_exclusive_and_not_once_a_renewal_is_overdue(backend):
    # The turn engine asks this at the top of every round and before each tool call (seed 002,
    # "Leases"); a host on a real lease must answer it from the lease as it stands now.
    lease_of: dict = {}

    def decide(request):
        held = request.fence()
        lease_of["alice"].last_renewed -= lease_of["alice"].ttl  # the renewal falls overdue mid-turn
        return "completed" if held and not request.fence() else "failed"

    rig = await make_rig(backend, decide=decide)
    try:
        lease = lease_of["alice"] = await rig.node.leases.acquire(seat_key("alice"))
        await rig.runtime.on_seat_acquired("alice", lease)
        await rig.publish(mail("worked under an exclusive lease"))
        await eventually(lambda: rig.turns.outcomes == ["completed"],
                         message="the fence to read held, then not held once the renewal was overdue")
    finally:
        await rig.runtime.stop(cut=True)
