"""Leases, fencing epochs and the keeper, on both backends, with two simulated nodes.

Lease time runs on the backend's FakeClock, so a TTL is stepped over rather than waited out.
"""
from __future__ import annotations

import dataclasses

import pytest

from engine.coord.contract import CoordError, Unavailable
from engine.coord.keeper import LeaseKeeper
from engine.coord.local import LocalCoord
from engine.coord.leases import (
    LEASES_BUCKET,
    LeaseManager,
    duty_key,
    presence_key,
    seat_key,
)
from tests.queue.waiting import eventually

pytestmark = pytest.mark.timeout(60)

TTL = 45.0
SEAT = seat_key("alice")


async def _nodes(backend, **kw) -> tuple[LeaseManager, LeaseManager]:
    a = LeaseManager(await backend.store("node-a"), "node-a", TTL, backend.clock, **kw)
    b = LeaseManager(await backend.store("node-b"), "node-b", TTL, backend.clock, **kw)
    return a, b


async def test_one_holder_at_a_time(backend):
    a, b = await _nodes(backend)
    lease = await a.acquire(SEAT)
    assert lease is not None and lease.holder == "node-a" and lease.epoch >= 1
    assert await b.acquire(SEAT) is None
    for node in (a, b):
        held = await node.holder(SEAT)
        assert (held.holder, held.epoch) == ("node-a", lease.epoch)
        assert (held.acquired_at, held.renewed_at, held.expires_at) == (lease.acquired_at, lease.acquired_at, lease.acquired_at + TTL)


async def test_a_renew_extends_the_lease(backend):
    a, b = await _nodes(backend)
    lease = await a.acquire(SEAT)
    backend.elapse(TTL * 0.9)
    assert await a.renew(lease)
    assert lease.last_renewed == backend.clock()
    backend.elapse(TTL * 0.9)  # past the first TTL, inside the renewed one
    assert await b.acquire(SEAT) is None
    assert (await b.holder(SEAT)).holder == "node-a"
    assert lease.is_exclusive(backend.clock() - TTL * 0.9 + 1)


async def test_an_expired_lease_is_claimed_by_the_other_node_with_a_larger_epoch(backend):
    a, b = await _nodes(backend)
    first = await a.acquire(SEAT)
    backend.elapse(TTL)
    assert await a.holder(SEAT) is None
    second = await b.acquire(SEAT)
    assert second is not None and second.epoch > first.epoch
    assert not await a.renew(first)
    assert first.lost and not first.is_exclusive(backend.clock())
    assert (await a.holder(SEAT)).holder == "node-b"


async def test_exclusivity_ends_before_a_peer_can_claim(backend):
    a, b = await _nodes(backend)
    lease = await a.acquire(SEAT)
    margin = lease.safety_margin
    assert margin == pytest.approx(TTL / 3)
    start = lease.last_renewed
    assert lease.is_exclusive(start + TTL - margin - 0.001)
    backend.elapse(TTL - margin)
    assert not lease.is_exclusive(backend.clock())  # the holder has stopped acting ...
    assert await b.acquire(SEAT) is None            # ... while no peer can claim yet
    backend.elapse(margin)
    assert await b.acquire(SEAT) is not None


async def test_the_safety_margin_is_a_setting(backend):
    a, _ = await _nodes(backend, safety_margin=5.0)
    lease = await a.acquire(SEAT)
    assert lease.is_exclusive(lease.last_renewed + TTL - 5.001)
    assert not lease.is_exclusive(lease.last_renewed + TTL - 5.0)


async def test_epochs_never_decrease(backend):
    a, b = await _nodes(backend)
    epochs = []
    for step in range(6):
        node = (a, b)[step % 2]
        lease = await node.acquire(SEAT)
        assert lease is not None
        epochs.append(lease.epoch)
        assert await a.epoch(SEAT) == lease.epoch
        if step % 3 == 0:
            assert await node.release(lease)
        else:
            backend.elapse(TTL)
    assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs)


async def test_a_released_lease_is_free_at_once_and_its_epoch_survives(backend):
    a, b = await _nodes(backend)
    lease = await a.acquire(SEAT)
    assert await a.release(lease)
    assert lease.released and not lease.is_exclusive(backend.clock())
    assert await a.holder(SEAT) is None
    taken = await b.acquire(SEAT)
    assert taken.epoch == lease.epoch + 1
    assert not await a.release(lease)  # giving back what is already given back does nothing
    assert (await b.holder(SEAT)).holder == "node-b"


async def test_a_stale_release_does_not_free_the_new_holder(backend):
    a, b = await _nodes(backend)
    old = await a.acquire(SEAT)
    backend.elapse(TTL)
    new = await b.acquire(SEAT)
    assert not await a.release(old)
    assert old.lost  # the store said somebody else holds it
    assert not await a.renew(old)  # a lost lease stays lost
    assert (await b.holder(SEAT)).epoch == new.epoch


async def test_a_lease_whose_ttl_leaves_no_room_for_the_margin_is_refused_naming_both(backend):
    none = LeaseManager(await backend.store("node-a"), "node-a", TTL, backend.clock, safety_margin=0)
    assert (await none.acquire(SEAT)).safety_margin == 0  # no margin at all is a margin
    wide = LeaseManager(await backend.store("node-b"), "node-b", TTL, backend.clock, safety_margin=10)
    with pytest.raises(CoordError) as refused:
        await wide.acquire(duty_key("short"), ttl=10)
    assert str(refused.value) == f"coord: {duty_key('short')}: a lease TTL of 10.0 leaves no room for a 10 s margin"


@pytest.mark.parametrize("ttl, margin, why", [
    (0, None, "coordination.lease_ttl_seconds: 0 must be positive"),
    (-45, None, "coordination.lease_ttl_seconds: -45 must be positive"),
    (TTL, TTL, "lease safety margin 45.0: must be at least 0 and below the TTL (45.0)"),
    (TTL, -1, "lease safety margin -1: must be at least 0 and below the TTL (45.0)"),
], ids=["zero ttl", "negative ttl", "margin as long as the ttl", "negative margin"])
async def test_lease_settings_that_leave_no_lease_are_refused_naming_the_setting(backend, ttl, margin, why):
    with pytest.raises(CoordError) as refused:
        LeaseManager(await backend.store("node-a"), "node-a", ttl, backend.clock, safety_margin=margin)
    assert str(refused.value) == f"coord: {why}"


async def test_a_one_second_lease_with_no_margin_is_a_lease(backend):
    brief = LeaseManager(await backend.store("node-a"), "node-a", 1, backend.clock, safety_margin=0)
    lease = await brief.acquire(SEAT)
    assert (lease.ttl, lease.safety_margin, lease.data) == (1.0, 0, {})


async def test_the_epochs_live_in_the_store_given_for_them(backend):
    """`coordination.type: local` keeps the leases in process and the fencing epochs on the
    records' store: a restarted node, its in-process leases gone, still takes a larger epoch."""
    records = await backend.store("node-a")
    before = LeaseManager(LocalCoord(clock=backend.clock), "node-a", TTL, backend.clock, epochs=records)
    lease = await before.acquire(SEAT)
    after = LeaseManager(LocalCoord(clock=backend.clock), "node-a", TTL, backend.clock, epochs=records)
    assert (await after.acquire(SEAT)).epoch == lease.epoch + 1


async def test_a_key_never_taken_reads_epoch_zero(backend):
    a, _ = await _nodes(backend)
    assert await a.epoch(seat_key("nobody")) == 0
    lease = await a.acquire(seat_key("nobody"))
    assert await a.epoch(seat_key("nobody")) == lease.epoch >= 1


@pytest.mark.parametrize("how", ["taken", "taken-over", "renewed", "renewed-after-a-lost-answer"])
async def test_a_lease_left_behind_leaves_the_store_after_its_lifetime(backend, how):
    """A node that died holding a lease leaves no entry for ever: each write of it carries the
    store-side lifetime (twice the lease's ttl) -- the first take, a take-over of an expired
    holder's entry, a renewal, and a renewal retried from the store's latest revision after a
    lost answer."""
    a, b = await _nodes(backend)
    key = duty_key("probe")
    lease = await a.acquire(key, ttl=1)
    if how == "taken-over":
        backend.elapse(1)
        a, lease = b, await b.acquire(key, ttl=1)
        assert lease is not None
    backend.elapse(0.5)
    if how == "renewed-after-a-lost-answer":
        assert await a.renew(dataclasses.replace(lease))  # landed; its caller never heard
    if how.startswith("renewed"):
        assert await a.renew(lease)
    backend.elapse(2)

    async def gone() -> bool:
        return await a.store.get(LEASES_BUCKET, key) is None

    await eventually(gone, message="the renewed entry's store lifetime to take it")


async def test_a_renew_whose_answer_was_lost_keeps_the_lease(backend):
    a, _ = await _nodes(backend)
    lease = await a.acquire(SEAT)
    landed = dataclasses.replace(lease)  # the renew that landed, though its caller never heard
    backend.elapse(10)
    assert await a.renew(landed)
    backend.elapse(10)
    assert await a.renew(lease)  # from the stale revision: still ours, same node and epoch
    assert not lease.lost and lease.revision > landed.revision


async def test_presence_leases_carry_roles_and_labels_and_list_the_fleet(backend):
    a, b = await _nodes(backend)
    await a.acquire_presence(["seats", "ingress"], ["zone-a"])
    pb = await b.acquire_presence(["workers"])
    await a.acquire(duty_key("scheduler"))
    roster = {r.holder: r.data for r in await a.list("node:")}
    assert roster == {"node-a": {"roles": ["seats", "ingress"], "labels": ["zone-a"]},
                      "node-b": {"roles": ["workers"], "labels": []}}
    assert [r.key for r in await b.list("worker:")] == ["worker:scheduler"]
    backend.elapse(TTL / 2)
    assert await b.renew(pb)
    backend.elapse(TTL / 2)  # node-a's presence lapses, node-b's was renewed
    assert [r.key for r in await a.list("node:")] == [presence_key("node-b")]
    # the renewal kept what the lease says: its roles and labels, when it was first taken
    [renewed] = await a.list("node:")
    assert renewed.data == {"roles": ["workers"], "labels": []}
    assert (renewed.acquired_at, renewed.renewed_at, renewed.expires_at) == (pb.acquired_at, pb.last_renewed, pb.last_renewed + TTL)
    assert renewed.revision == pb.revision and renewed.epoch == pb.epoch


async def test_a_duty_lease_may_have_its_own_ttl(backend):
    a, b = await _nodes(backend)
    lease = await a.acquire(duty_key("maintenance"), ttl=45 * 60)
    assert lease.ttl == 45 * 60 and lease.safety_margin == pytest.approx(15 * 60)
    backend.elapse(TTL * 2)
    assert await b.acquire(duty_key("maintenance")) is None


async def test_the_keeper_renews_and_reports_a_lease_a_peer_took(backend):
    a, b = await _nodes(backend)
    lost = []
    keeper = LeaseKeeper(a, on_lost=lost.append)
    assert keeper.interval == pytest.approx(TTL / 3)
    kept, taken = await a.acquire(SEAT), await a.acquire(seat_key("bob"))
    keeper.add(kept)
    keeper.add(taken)
    backend.elapse(TTL / 3)
    assert await keeper.renew_once() == []
    assert kept.last_renewed == taken.last_renewed == backend.clock()
    # node-a's view of bob is stale: a peer took bob after it lapsed
    keeper.discard(taken)
    backend.elapse(TTL)
    assert await b.acquire(seat_key("bob")) is not None
    keeper.add(taken)
    assert await a.renew(kept)
    assert await keeper.renew_once() == [taken]
    assert lost == [taken] and taken.lost
    assert keeper.leases == [kept]


async def test_an_unanswered_renew_keeps_the_lease_until_exclusivity_runs_out(backend):
    a, _ = await _nodes(backend)
    lost = []
    keeper = LeaseKeeper(a, on_lost=lost.append)
    lease = await a.acquire(SEAT)
    keeper.add(lease)
    await backend.outage()
    backend.elapse(TTL / 3)
    assert not await a.renew(lease)  # not renewed: the store said nothing
    assert await keeper.renew_once() == []  # the store said nothing: not lost, still exclusive
    assert not lease.lost and lease.is_exclusive(backend.clock())
    backend.elapse(TTL / 3)
    assert await keeper.renew_once() == [lease]  # two silent renews: it stops acting now
    assert lost == [lease] and not lease.lost
    with pytest.raises(Unavailable):
        await a.holder(SEAT)


async def test_the_keeper_loop_renews_on_its_interval_until_stopped(backend):
    a, _ = await _nodes(backend)
    reported = []

    async def on_lost(lease):
        reported.append(lease)

    keeper = LeaseKeeper(a, interval=0.05, on_lost=on_lost)
    lease = await a.acquire(SEAT)
    keeper.add(lease)
    keeper.start()
    try:
        backend.elapse(TTL / 3)
        target = backend.clock()

        async def renewed() -> bool:
            return lease.last_renewed == target

        await eventually(renewed, message="the keeper's loop to renew")
    finally:
        await keeper.stop()
    assert reported == [] and not lease.lost


async def test_the_keeper_awaits_a_callback_that_is_a_coroutine(backend):
    a, b = await _nodes(backend)
    reported, taken = [], []

    async def on_lost(lease):
        reported.append(lease)

    async def on_taken(lease):
        taken.append(lease)

    keeper = LeaseKeeper(a, on_lost=on_lost)
    lease = await a.acquire(SEAT)
    keeper.add(lease)
    backend.elapse(TTL)
    assert await b.acquire(SEAT) is not None
    assert await keeper.renew_once() == [lease]
    assert reported == [lease]
    keeper.hold(seat_key("bob"), ttl=45 * 60, data={"why": "standing"}, on_taken=on_taken)
    [bob] = await keeper.retake_once()
    assert taken == [bob] and bob.key == seat_key("bob")
    assert bob.ttl == 45 * 60 and bob.data == {"why": "standing"}  # retaken as the claim says


async def test_a_retake_goes_past_a_claim_held_here_held_elsewhere_refused_or_let_go_while_taken(backend):
    a, b = await _nodes(backend)
    keeper = LeaseKeeper(a)
    mine = await a.acquire(seat_key("held-here"))
    keeper.hold(seat_key("held-here"), lease=mine)
    assert await b.acquire(seat_key("held-elsewhere")) is not None
    keeper.hold(seat_key("held-elsewhere"))
    keeper.hold(seat_key("let-go"))
    keeper.hold("")  # a claim the store refuses to take (an empty key): the next claims are still taken
    keeper.hold(seat_key("free"))
    acquire = a.acquire

    async def let_go_while_taking(key, **kw):  # the claim is let go of while its take is in flight
        if key == seat_key("let-go"):
            keeper.let_go(key)
        return await acquire(key, **kw)

    a.acquire = let_go_while_taking
    taken = await keeper.retake_once()
    assert [lease.key for lease in taken] == [seat_key("free")]
    assert await a.holder(seat_key("let-go")) is None  # taken while let go of: given straight back
    assert (await a.holder(seat_key("held-elsewhere"))).holder == "node-b"
    assert sorted(lease.key for lease in keeper.leases) == [seat_key("free"), seat_key("held-here")]


async def test_a_stopped_keeper_starts_again_and_letting_go_of_an_unheld_key_is_nothing(backend):
    a, _ = await _nodes(backend)
    keeper = LeaseKeeper(a, interval=0.05)
    keeper.let_go(seat_key("never-held"))
    lease = await a.acquire(SEAT)
    keeper.add(lease)
    keeper.start()
    await keeper.stop()
    keeper.start()
    try:
        backend.elapse(TTL / 3)
        target = backend.clock()

        async def renewed() -> bool:
            return lease.last_renewed == target

        await eventually(renewed, message="the restarted keeper's loop to renew")
    finally:
        await keeper.stop()


async def test_two_nodes_racing_for_a_lease_get_one_winner(backend):
    import asyncio

    a, b = await _nodes(backend)
    for _ in range(3):
        won = await asyncio.gather(a.acquire(SEAT), b.acquire(SEAT))
        held = [lease for lease in won if lease is not None]
        assert len(held) == 1
        assert (await a.holder(SEAT)).epoch == held[0].epoch
        backend.elapse(TTL)


async def test_a_restarted_node_takes_its_own_lease_back_with_a_larger_epoch(backend):
    before, _ = await _nodes(backend)
    old = await before.acquire(SEAT)
    after = LeaseManager(await backend.store("node-a"), "node-a", TTL, backend.clock)
    new = await after.acquire(SEAT)
    assert new is not None and new.epoch > old.epoch
    assert not await before.renew(old) and old.lost  # the previous incarnation's view is stale


async def test_a_standing_claim_that_was_lost_is_taken_again_with_a_larger_epoch(backend):
    a, _ = await _nodes(backend)
    lost, taken = [], []
    keeper = LeaseKeeper(a, on_lost=lost.append)
    presence = await a.acquire_presence(["seats"])
    keeper.hold(presence_key("node-a"), data={"roles": ["seats"]}, lease=presence, on_taken=taken.append)
    backend.elapse(TTL / 3)
    # While the loop stalled its entry lapsed from the store: the renew finds it gone.
    await a.store.delete(LEASES_BUCKET, presence_key("node-a"))
    assert await keeper.renew_once() == [presence]
    assert lost == [presence]
    assert len(taken) == 1 and taken[0].epoch > presence.epoch  # taken again in the same step
    again = taken[0]
    assert keeper.held(presence_key("node-a")) is again and again.is_exclusive(backend.clock())
    held = await a.holder(presence_key("node-a"))
    assert (held.holder, held.epoch, held.data["roles"]) == ("node-a", again.epoch, ["seats"])


async def test_a_standing_claim_missed_at_boot_is_taken_once_the_holder_lets_go(backend):
    a, b = await _nodes(backend)
    squatter = await b.acquire(presence_key("node-a"))  # say, a node that was given our id
    taken = []
    keeper = LeaseKeeper(a)
    keeper.hold(presence_key("node-a"), data={"roles": []}, on_taken=taken.append)
    assert await keeper.retake_once() == [] and keeper.held(presence_key("node-a")) is None
    await b.release(squatter)
    await keeper.renew_once()
    assert len(taken) == 1 and taken[0].epoch > squatter.epoch
    keeper.let_go(presence_key("node-a"))
    await a.store.delete(LEASES_BUCKET, presence_key("node-a"))  # lost again, and no longer claimed
    taken.clear()
    assert len(await keeper.renew_once()) == 1
    assert taken == [] and keeper.held(presence_key("node-a")) is None


async def test_a_standing_claim_waits_out_a_store_that_does_not_answer(backend):
    a, _ = await _nodes(backend)
    keeper = LeaseKeeper(a)
    keeper.hold(presence_key("node-a"))
    await backend.outage()
    assert await keeper.renew_once() == []  # unanswered: logged, tried again next step
    assert keeper.held(presence_key("node-a")) is None


# -- clock skew (module docstring of engine/coord/leases.py: "the margin covering clock skew
# between them"). Each node reads its own clock; the store's own time is the backend's. ----------
class SkewedClock:
    """A node's clock: the backend's true time plus a fixed offset."""

    def __init__(self, true_time, offset: float) -> None:
        self.true_time, self.offset = true_time, offset

    def __call__(self) -> float:
        return self.true_time() + self.offset


STEP = 0.25  # true time advances in quarter seconds: exact in binary, finer than any skew tested


async def _handover(backend, successor_ahead: float, key: str = SEAT, **kw) -> tuple[float, float]:
    """The holder renews twice, then falls silent (stalled, or cut off from the store); the
    successor, whose clock runs `successor_ahead` seconds ahead of the holder's, tries to claim
    at every step. Returns, in true time since the holder's last renew, when the holder stopped
    acting on the lease and when the successor took it."""
    holder = LeaseManager(await backend.store("node-a"), "node-a", TTL, SkewedClock(backend.clock, 0.0), **kw)
    successor = LeaseManager(await backend.store("node-b"), "node-b", TTL, SkewedClock(backend.clock, successor_ahead), **kw)
    lease = await holder.acquire(key)
    for _ in range(2):
        backend.elapse(TTL / 3)
        assert await holder.renew(lease)
        assert await successor.acquire(key) is None
    last_renew = backend.clock()
    stopped = taken = None
    while taken is None:
        assert backend.clock() - last_renew < 2 * TTL, "the successor never took the lease"
        if stopped is None and not lease.is_exclusive(holder.clock()):
            stopped = backend.clock() - last_renew
        claim = await successor.acquire(key)
        if claim is not None:
            taken = backend.clock() - last_renew
            assert claim.epoch > lease.epoch
            break
        backend.elapse(STEP)
    assert not await holder.renew(lease) and lease.lost  # the holder, back, learns it lost the lease
    return (stopped if stopped is not None else float("inf")), taken


@pytest.mark.parametrize("successor_ahead", [0.0, 7.5, TTL / 3 - STEP, -TTL / 3])
async def test_a_successor_whose_clock_is_skewed_within_the_margin_never_acts_before_the_holder_stopped(backend, successor_ahead):
    stopped, taken = await _handover(backend, successor_ahead)
    assert stopped == TTL - TTL / 3  # the holder stops a margin before its TTL, by its own clock
    assert taken >= stopped, f"the successor took the lease {stopped - taken} s before the holder stopped acting"
    # ... and takes it as soon as its own clock says the TTL has run out: no longer than that.
    assert taken == pytest.approx(max(TTL - successor_ahead, 0), abs=STEP)


async def test_a_skew_past_the_margin_overlaps_and_a_wider_margin_setting_covers_it(backend):
    ahead = TTL / 3 + 5  # the successor's clock 20 s ahead: more than the default 15 s margin
    stopped, taken = await _handover(backend, ahead)
    assert taken < stopped  # both would act for those seconds: the margin is what keeps them apart
    stopped, taken = await _handover(backend, ahead, key=seat_key("bob"), safety_margin=TTL / 3 + 6)
    assert taken >= stopped
