"""The fleet's shared records on the coordination store: the completion ledger, dedupe slots,
the activation pointer (engine.revisions) and apply status. Both backends, two simulated nodes where it matters."""
from __future__ import annotations

import pytest

from engine import revisions
from engine.config import parse_company
from engine.config.keyring import Keyring
from engine.coord.contract import CoordError, Unavailable
from engine.coord.dedupe import Dedupe
from engine.coord.ledger import LEDGER_HORIZON_SECONDS, CompletionLedger
from tests.queue.waiting import eventually

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
    # what a seat host writes after a turn: the same rule, without reading the record back
    assert await ledger.mark_worked("alice", "t2", "turn-3", reason="abandoned") is True
    assert await ledger.mark_worked("alice", "t2", "turn-4") is False
    assert await ledger.mark_worked("alice", "t1", "turn-5") is False
    assert [(r.turn_id, r.reason) for r in (await ledger.worked("alice", "t1"), await ledger.worked("alice", "t2"))] == \
        [("turn-1", ""), ("turn-3", "abandoned")]


async def test_a_turn_withdraws_only_its_own_record_and_the_trigger_can_be_worked_again(backend):
    # A turn whose end record did not land takes back the record written beside it; another
    # turn's record, or none, is left as it is.
    here, there = CompletionLedger(await backend.store("node-a")), CompletionLedger(await backend.store("node-b"))
    await here.mark_worked("alice", "t1", "turn-1")
    assert await there.withdraw("alice", "t1", "turn-2") is False  # not its record
    assert (await here.worked("alice", "t1")).turn_id == "turn-1"
    assert await there.withdraw("alice", "t1", "turn-1") is True
    assert await here.worked("alice", "t1") is None and await there.worked("alice", "t1") is None
    assert await there.withdraw("alice", "t1", "turn-1") is False  # nothing left to take back
    assert await here.mark_worked("alice", "t1", "turn-3") is True  # the redelivery's turn records it
    assert (await there.worked("alice", "t1")).turn_id == "turn-3"


async def test_a_record_without_a_reason_reads_as_worked_by_running_and_keeps_a_given_one(backend):
    ledger = CompletionLedger(await backend.store())
    ran = await ledger.record_worked("alice", "t1", "turn-1")
    assert ran.reason == "" and (await ledger.worked("alice", "t1")).reason == ""
    assert isinstance(ran.worked_at, float)  # the store's own stamp of the record
    await ledger.record_worked("alice", "t2", "turn-2", reason="abandoned")
    assert (await ledger.worked("alice", "t2")).reason == "abandoned"


@pytest.mark.parametrize("handle", ["", "a:b"])
async def test_a_handle_that_could_collide_in_the_key_is_refused_naming_it(backend, handle):
    ledger = CompletionLedger(await backend.store())
    with pytest.raises(CoordError, match=f"ledger handle {handle!r}"):
        await ledger.record_worked(handle, "t1", "turn-1")
    with pytest.raises(CoordError, match="ledger trigger id"):
        await ledger.worked("alice", "")


async def test_a_ledger_reports_the_age_of_the_bucket_already_there(backend):
    first = CompletionLedger(await backend.store("node-a"), horizon=3600)
    await first.provision()
    later = CompletionLedger(await backend.store("node-b"), horizon=7200)  # a node booted with another setting
    await later.provision()
    assert later.horizon == 3600


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

    await eventually(forgotten, message="the ledger's horizon to pass")


async def test_the_first_claim_wins_on_every_node(backend):
    here = Dedupe(await backend.store("node-a"), node_id="node-a")
    there = Dedupe(await backend.store("node-b"), node_id="node-b")
    assert await here.claim("webhook", "gh-delivery-1", ttl=600)
    assert not await there.claim("webhook", "gh-delivery-1", ttl=600)
    assert not await here.claim("webhook", "gh-delivery-1", ttl=600)
    assert await there.claim("custody", "gh-delivery-1", ttl=600)  # namespaces are apart
    assert await there.claim("webhook", "gh-delivery-2", ttl=600)


async def test_the_first_claims_note_and_node_are_read_back_on_another_node(backend):
    here = Dedupe(await backend.store("node-a"), node_id="node-a")
    there = Dedupe(await backend.store("node-b"), node_id="node-b")
    assert await here.claim("webhook", "body-1", ttl=600, note={"delivery_id": "d-1"})
    assert not await there.claim("webhook", "body-1", ttl=600, note={"delivery_id": "d-2"})
    assert await there.holder("webhook", "body-1") == {"delivery_id": "d-1", "node": "node-a"}
    assert await there.holder("webhook", "body-2") is None  # never claimed


@pytest.mark.parametrize("namespace", ["", "web:hook"])
async def test_a_dedupe_namespace_that_could_collide_in_the_key_is_refused_naming_it(backend, namespace):
    dedupe = Dedupe(await backend.store())
    with pytest.raises(CoordError, match=f"dedupe namespace {namespace!r}"):
        await dedupe.claim(namespace, "k", ttl=600)
    with pytest.raises(CoordError, match="dedupe key in webhook"):
        await dedupe.claim("webhook", "", ttl=600)


async def test_a_dedupe_slot_is_free_again_after_its_ttl(backend):
    dedupe = Dedupe(await backend.store())
    assert await dedupe.claim("webhook", "d1", ttl=backend.short_age)
    backend.elapse(backend.short_age)

    async def free() -> bool:
        return await dedupe.claim("webhook", "d1", ttl=600)

    await eventually(free, message="the dedupe slot to expire")
    assert not await dedupe.claim("webhook", "d1", ttl=600)


async def test_a_claim_the_store_did_not_answer_is_unavailable_not_lost(backend):
    dedupe = Dedupe(await backend.store())
    await dedupe.provision()
    await backend.outage()
    with pytest.raises(Unavailable):
        await dedupe.claim("webhook", "d1", ttl=600)


def _company(name: str = "nimbus", extra_seat: str = ""):
    text = f"""
name: {name}
org:
  seats:
    - {{handle: alice, kind: agent, role: engineer}}
{extra_seat}"""
    return text, parse_company(text)


KEYRING = Keyring.from_pairs([("k1", "k" * 40)], "k1")


async def test_the_activation_pointer_is_one_for_the_fleet_and_its_generation_grows(backend):
    admin, node = await backend.store("node-a"), await backend.store("node-b")
    assert await revisions.read_pointer(node, KEYRING) is None
    text, company = _company()
    first = await revisions.activate(admin, KEYRING, text, company, "maya")
    seen = await revisions.read_pointer(node, KEYRING)
    assert (seen.generation, seen.digest, seen.document) == (1, company.digest(), text)
    text2, company2 = _company(extra_seat="    - {handle: bob, kind: agent, role: engineer}")
    second = await revisions.activate(admin, KEYRING, text2, company2, "maya")
    back = await revisions.activate(admin, KEYRING, text, company, "maya")
    assert first.generation < second.generation < back.generation  # the same document again is news
    assert (await revisions.read_pointer(node, KEYRING)).document == text


async def test_activating_the_active_document_again_changes_nothing(backend):
    store = await backend.store()
    text, company = _company()
    first = await revisions.activate(store, KEYRING, text, company, "maya")
    again = await revisions.activate(store, KEYRING, text, company, "maya")
    assert again == first


async def test_a_pointer_sealed_under_a_key_this_node_lacks_is_refused(backend):
    store = await backend.store()
    text, company = _company()
    await revisions.activate(store, KEYRING, text, company, "maya")
    stranger = Keyring.from_pairs([("k2", "z" * 40)], "k2")
    with pytest.raises(revisions.RevisionError, match="not sealed by a key in secrets.keys"):
        await revisions.read_pointer(store, stranger)


async def test_every_node_reports_what_it_applied(backend):
    a, b = await backend.store("node-a"), await backend.store("node-b")
    text, company = _company()
    pointer = await revisions.activate(a, KEYRING, text, company, "maya")
    await revisions.report_applied(a, "node-a", pointer.generation, "applied", "mailboxes")
    await revisions.report_applied(b, "node-b", pointer.generation, "refused", "received", "org.seats.0.handle: bad")
    status = {s["node"]: s for s in await revisions.applied_status(a)}
    assert sorted(status) == ["node-a", "node-b"]
    assert (status["node-a"]["status"], status["node-a"]["reached"]) == ("applied", "mailboxes")
    assert status["node-b"]["error"] == "org.seats.0.handle: bad"


async def test_a_node_that_stops_reporting_vanishes_from_apply_status(backend):
    control = await backend.store()
    await revisions.report_applied(control, "gone-node", 1, "applied", "mailboxes", ttl=backend.short_age)
    backend.elapse(backend.short_age)

    async def vanished() -> bool:
        return "gone-node" not in {s["node"] for s in await revisions.applied_status(control)}

    await eventually(vanished, message="the apply status entry's lifetime to clear the report")
