"""What the coordination store keeps across a restart of the store itself, on every backend that
persists (seed 002, "Replica count": the shared records "have to survive a restart as much as a
peer"; "What an acknowledged publish has reached": with `sync: always` an acknowledged write is
on disk). The store is stopped in order and started again on the same directory; a new client
attaches, as a restarted node's would."""
from __future__ import annotations

import pytest

from engine import revisions
from engine.coord.contract import KeyExists, RevisionMismatch
from engine.coord.leases import LeaseManager, seat_key
from engine.coord.ledger import CompletionLedger
from engine.config.keyring import Keyring
from seats.pauses import PauseBook
from tests.coord.test_records import _company

pytestmark = pytest.mark.timeout(90)

B = "crewlet_restart"
KEYRING = Keyring.from_pairs([("k1", "k" * 40)], "k1")


async def test_every_value_revision_and_removal_survives_a_restart(persisting_backend):
    before = await persisting_backend.store("node-a")
    await before.ensure_bucket(B)
    await before.ensure_bucket("crewlet_restart_aged", max_age=3600)
    kept = await before.create(B, "pause:bob", b"paused")
    rewritten = await before.update(B, "pause:bob", b"paused again", kept)
    await before.put(B, "budget:org:day", b"1500")
    await before.create(B, "gone", b"x")
    await before.delete(B, "gone")

    await persisting_backend.restart()
    after = await persisting_backend.store("node-a")

    entry = await after.get(B, "pause:bob")
    assert (entry.value, entry.revision) == (b"paused again", rewritten)
    assert (await after.get(B, "budget:org:day")).value == b"1500"
    assert await after.get(B, "gone") is None
    assert await after.keys(B) == ["budget:org:day", "pause:bob"]
    with pytest.raises(KeyExists):
        await after.create(B, "pause:bob", b"a second pause")
    with pytest.raises(RevisionMismatch):
        await after.update(B, "pause:bob", b"stale", kept)
    assert await after.put(B, "pause:bob", b"later") > rewritten  # revisions are never reused
    assert (await after.ensure_bucket("crewlet_restart_aged")).max_age == 3600


async def test_epochs_and_the_activation_generation_keep_growing_after_a_restart(persisting_backend):
    store = await persisting_backend.store("node-a")
    first = await LeaseManager(store, "node-a", 45).acquire(seat_key("alice"))
    text, company = _company()
    activated = await revisions.activate(store, KEYRING, text, company, "maya")

    await persisting_backend.restart()
    store = await persisting_backend.store("node-a")

    again = await LeaseManager(store, "node-a", 45).acquire(seat_key("alice"))
    assert again is not None and again.epoch > first.epoch
    pointer = await revisions.read_pointer(store, KEYRING)
    assert (pointer.generation, pointer.digest) == (activated.generation, company.digest())
    same = await revisions.activate(store, KEYRING, text, company, "maya")
    assert same.generation == activated.generation and not same.changed
    text2, company2 = _company(name="nimbus-two")
    assert (await revisions.activate(store, KEYRING, text2, company2, "maya")).generation == activated.generation + 1


async def test_a_pause_and_a_worked_trigger_survive_a_restart(persisting_backend):
    store = await persisting_backend.store("node-a")
    await PauseBook(store).pause("bob", reason="on leave", stop_running=False, paused_by="user:maya")
    await CompletionLedger(store).record_worked("alice", "trigger-1", "turn-1")

    await persisting_backend.restart()
    store = await persisting_backend.store("node-a")

    pause = await PauseBook(store).get("bob")
    assert pause is not None and pause.reason == "on leave"
    worked = await CompletionLedger(store).worked("alice", "trigger-1")
    assert worked is not None and worked.turn_id == "turn-1"
