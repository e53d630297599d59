"""The fleet's shared records on the coordination store: the completion ledger, dedupe slots,
the activation pointer and apply status. Both backends, two simulated nodes where it matters."""
from __future__ import annotations

import pytest

from engine.coord.activation import Activation
from engine.coord.contract import RevisionMismatch, Unavailable
from engine.coord.dedupe import Dedupe
from engine.coord.ledger import LEDGER_HORIZON_SECONDS, CompletionLedger
from tests.coord.conftest import eventually

pytestmark = pytest.mark.timeout(60)


async def test_a_worked_trigger_is_worked_on_every_node(backend):
    here = CompletionLedger(await backend.store("node-a"))
    there = CompletionLedger(await backend.store("node-b"))
    assert await here.worked("alice", "slack:C1:1700.1") is None
    record = await here.record_worked("alice", "slack:C1:1700.1", "turn-1")
    assert (record.handle, record.trigger_id, record.turn_id) == ("alice", "slack:C1:1700.1", "turn-1")
    seen = await there.worked("alice", "slack:C1:1700.1")
    assert seen == record
    assert await there.worked("bob", "slack:C1:1700.1") is None  # per seat


async def test_the_first_turn_to_record_a_trigger_stands(backend):
    ledger = CompletionLedger(await backend.store())
    await ledger.record_worked("alice", "t1", "turn-1")
    again = await ledger.record_worked("alice", "t1", "turn-2")
    assert again.turn_id == "turn-1"
    assert (await ledger.worked("alice", "t1")).turn_id == "turn-1"


async def test_the_ledger_keeps_a_week_by_default(backend):
    ledger = CompletionLedger(await backend.store())
    await ledger.provision()
    assert ledger.horizon == LEDGER_HORIZON_SECONDS == 7 * 24 * 3600


async def test_ledger_records_expire_after_the_horizon(backend):
    ledger = CompletionLedger(await backend.store(), horizon=backend.short_age)
    await ledger.record_worked("alice", "t1", "turn-1")
    backend.elapse(backend.short_age)

    async def forgotten() -> bool:
        return await ledger.worked("alice", "t1") is None

    await eventually(forgotten, what="the ledger's horizon to pass")


async def test_the_first_claim_wins_on_every_node(backend):
    here = Dedupe(await backend.store("node-a"), node_id="node-a")
    there = Dedupe(await backend.store("node-b"), node_id="node-b")
    assert await here.claim("webhook", "gh-delivery-1", ttl=600)
    assert not await there.claim("webhook", "gh-delivery-1", ttl=600)
    assert not await here.claim("webhook", "gh-delivery-1", ttl=600)
    assert await there.claim("custody", "gh-delivery-1", ttl=600)  # namespaces are apart
    assert await there.claim("webhook", "gh-delivery-2", ttl=600)


async def test_a_dedupe_slot_is_free_again_after_its_ttl(backend):
    dedupe = Dedupe(await backend.store())
    assert await dedupe.claim("webhook", "d1", ttl=backend.short_age)
    backend.elapse(backend.short_age)

    async def free() -> bool:
        return await dedupe.claim("webhook", "d1", ttl=600)

    await eventually(free, what="the dedupe slot to expire")
    assert not await dedupe.claim("webhook", "d1", ttl=600)


async def test_a_claim_the_store_did_not_answer_is_unavailable_not_lost(backend):
    dedupe = Dedupe(await backend.store())
    await dedupe.provision()
    await backend.outage()
    with pytest.raises(Unavailable):
        await dedupe.claim("webhook", "d1", ttl=600)


async def test_the_activation_pointer_is_one_for_the_fleet_and_its_epoch_grows(backend):
    admin = Activation(await backend.store("node-a"))
    node = Activation(await backend.store("node-b"))
    assert await node.get_active() is None
    first = await admin.set_active("rev-1", "sha256:aa")
    assert await node.get_active() == first
    second = await admin.set_active("rev-2", "sha256:bb")
    rollback = await admin.set_active("rev-1", "sha256:aa")
    assert first.epoch < second.epoch < rollback.epoch  # the same revision again is news
    assert (await node.get_active()).revision_id == "rev-1"


async def test_an_activation_from_a_stale_epoch_is_refused(backend):
    admin = Activation(await backend.store())
    first = await admin.set_active("rev-1", "d1", expected_epoch=0)
    with pytest.raises(RevisionMismatch):
        await admin.set_active("rev-x", "dx", expected_epoch=0)
    second = await admin.set_active("rev-2", "d2", expected_epoch=first.epoch)
    with pytest.raises(RevisionMismatch):
        await admin.set_active("rev-3", "d3", expected_epoch=first.epoch)
    assert await admin.get_active() == second


async def test_every_node_reports_what_it_applied(backend):
    a = Activation(await backend.store("node-a"))
    b = Activation(await backend.store("node-b"))
    pointer = await a.set_active("rev-1", "d1")
    await a.report_applied("node-a", "rev-1", "applied", pointer.epoch)
    await b.report_applied("node-b", "rev-0", "failed", pointer.epoch - 1)
    status = await a.applied_status()
    assert sorted(status) == ["node-a", "node-b"]
    assert (status["node-a"].revision_id, status["node-a"].status, status["node-a"].reached) == \
        ("rev-1", "applied", pointer.epoch)
    assert status["node-b"].status == "failed"
    await b.report_applied("node-b", "rev-1", "applied", pointer.epoch)
    assert (await a.applied_status())["node-b"].status == "applied"


async def test_apply_status_ages_in_a_minute_by_default(backend):
    default = Activation(await backend.store())
    await default.provision()
    assert default.status_age == 60


async def test_a_node_that_stops_reporting_vanishes_from_apply_status(backend):
    control = Activation(await backend.store(), status_age=backend.short_age)
    await control.report_applied("gone-node", "rev-1", "applied", 1)
    backend.elapse(backend.short_age)

    async def vanished() -> bool:
        return "gone-node" not in await control.applied_status()

    await eventually(vanished, what="the apply status bucket's age to clear the report")
