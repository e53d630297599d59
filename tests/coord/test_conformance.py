"""The coordination store contract, certified once for every backend (engine/coord/contract.py)."""
from __future__ import annotations

import asyncio

import pytest

from engine.coord.contract import (
    BucketNotFound,
    CoordError,
    CoordStore,
    InvalidName,
    KeyExists,
    RevisionMismatch,
    Unavailable,
)
from tests.queue.waiting import eventually

pytestmark = pytest.mark.timeout(60)

B = "crewlet_test"


async def _bucket(coord: CoordStore, name: str = B, max_age: float | None = None) -> str:
    await coord.ensure_bucket(name, max_age=max_age)
    return name


async def test_both_backends_satisfy_the_protocol(coord):
    assert isinstance(coord, CoordStore)


async def test_create_is_create_only(coord):
    b = await _bucket(coord)
    rev = await coord.create(b, "seat:alice", b"one")
    with pytest.raises(KeyExists) as refused:
        await coord.create(b, "seat:alice", b"two")
    assert str(refused.value) == f"coord: {b} seat:alice: already holds revision {rev}"
    entry = await coord.get(b, "seat:alice")
    assert (entry.key, entry.value, entry.revision) == ("seat:alice", b"one", rev)
    assert entry.updated > 0


async def test_compare_and_set_refuses_a_stale_revision(coord):
    b = await _bucket(coord)
    first = await coord.create(b, "k", b"one")
    second = await coord.update(b, "k", b"two", first)
    assert second > first
    with pytest.raises(RevisionMismatch):
        await coord.update(b, "k", b"stale", first)
    entry = await coord.get(b, "k")
    assert (entry.value, entry.revision) == (b"two", second)


async def test_compare_and_set_on_a_missing_key_is_refused(coord):
    b = await _bucket(coord)
    with pytest.raises(RevisionMismatch):
        await coord.update(b, "never", b"x", 1)
    with pytest.raises(RevisionMismatch):
        await coord.update(b, "never", b"x", 0)
    assert await coord.get(b, "never") is None


async def test_of_many_nodes_creating_a_deleted_key_at_once_exactly_one_wins(backend, coord):
    # The removal marker a delete leaves is itself the subject's last write: a create that
    # finds it must still be conditional on it, or every node that read the marker wins.
    b = await _bucket(coord)
    await coord.create(b, "seat:alice", b"first")
    await coord.delete(b, "seat:alice")
    stores = [coord] + [await backend.store(f"node-{n}") for n in "bcd"]

    async def take(store: CoordStore, n: int) -> int | None:
        try:
            return await store.create(b, "seat:alice", f"node-{n}".encode())
        except KeyExists:
            return None

    revs = await asyncio.gather(*(take(stores[n % len(stores)], n) for n in range(12)))
    won = [(n, rev) for n, rev in enumerate(revs) if rev is not None]
    assert len(won) == 1, f"several creates of one key won: {won}"
    entry = await coord.get(b, "seat:alice")
    assert (entry.value, entry.revision) == (f"node-{won[0][0]}".encode(), won[0][1])


async def test_an_empty_value_is_a_value(coord):
    b = await _bucket(coord)
    rev = await coord.create(b, "k", b"")
    entry = await coord.get(b, "k")
    assert (entry.value, entry.revision) == (b"", rev)
    assert await coord.keys(b) == ["k"]
    with pytest.raises(KeyExists):
        await coord.create(b, "k", b"again")


async def test_a_value_given_as_a_bytearray_or_memoryview_is_kept_as_its_bytes(coord):
    b = await _bucket(coord)
    await coord.put(b, "array", bytearray(b"from an array"))
    rev = await coord.create(b, "view", memoryview(b"from a view"))
    await coord.update(b, "view", memoryview(b"a view again"), rev)
    assert (await coord.get(b, "array")).value == b"from an array"
    assert (await coord.get(b, "view")).value == b"a view again"


async def test_put_writes_whatever_is_there_and_revisions_grow(coord):
    b = await _bucket(coord)
    revs = [await coord.put(b, "k", f"v{i}".encode()) for i in range(3)]
    assert revs == sorted(revs) and len(set(revs)) == 3
    assert (await coord.get(b, "k")).value == b"v2"


async def test_a_deleted_key_reads_absent_and_can_be_created_again(coord):
    b = await _bucket(coord)
    rev = await coord.create(b, "k", b"one")
    await coord.delete(b, "k")
    assert await coord.get(b, "k") is None
    again = await coord.create(b, "k", b"two")
    assert again > rev
    assert (await coord.get(b, "k")).value == b"two"


async def test_a_conditional_delete_refuses_a_stale_revision(coord):
    b = await _bucket(coord)
    first = await coord.create(b, "k", b"one")
    second = await coord.update(b, "k", b"two", first)
    with pytest.raises(RevisionMismatch):
        await coord.delete(b, "k", expected_revision=first)
    assert (await coord.get(b, "k")).value == b"two"
    await coord.delete(b, "k", expected_revision=second)
    assert await coord.get(b, "k") is None


async def test_a_conditional_delete_of_a_key_that_holds_nothing_is_refused(coord):
    b = await _bucket(coord)
    for expected in (1, 5):
        with pytest.raises(RevisionMismatch):
            await coord.delete(b, "never", expected_revision=expected)


async def test_a_delete_takes_the_buckets_next_revision_as_a_write_does(coord):
    b = await _bucket(coord)
    first = await coord.put(b, "k", b"one")
    await coord.delete(b, "k")
    assert await coord.put(b, "k", b"two") == first + 2


async def test_deleting_a_key_with_no_value_is_not_an_error(coord):
    b = await _bucket(coord)
    await coord.delete(b, "never")
    assert await coord.get(b, "never") is None


async def test_keys_lists_live_keys_by_prefix(coord):
    b = await _bucket(coord)
    assert await coord.keys(b) == []
    for key in ("seat:alice", "seat:bob", "node:n1", "seat:carol"):
        await coord.put(b, key, b"x")
    await coord.delete(b, "seat:bob")
    assert await coord.keys(b, prefix="seat:") == ["seat:alice", "seat:carol"]
    assert await coord.keys(b) == ["node:n1", "seat:alice", "seat:carol"]
    assert await coord.keys(b, prefix="worker:") == []


async def test_any_string_is_a_key_and_comes_back_as_written(coord):
    b = await _bucket(coord)
    odd = ["a.b", "with space", "x=3Ay", "ünï/cødé", "*", ">", "a:b:c"]
    for key in odd:
        await coord.create(b, key, key.encode())
    assert await coord.keys(b) == sorted(odd)
    for key in odd:
        assert (await coord.get(b, key)).value == key.encode()


async def test_every_node_sees_the_same_records(backend, coord):
    b = await _bucket(coord)
    other = await backend.store("node-b")
    rev = await coord.create(b, "seat:alice", b"node-a")
    with pytest.raises(KeyExists):
        await other.create(b, "seat:alice", b"node-b")
    assert (await other.get(b, "seat:alice")).revision == rev
    await other.update(b, "seat:alice", b"node-b", rev)
    assert (await coord.get(b, "seat:alice")).value == b"node-b"


async def test_a_value_older_than_its_bucket_age_is_gone(backend, coord):
    b = await _bucket(coord, "crewlet_aged", max_age=backend.short_age)
    await coord.create(b, "k", b"v")
    backend.elapse(backend.short_age)

    async def gone() -> bool:
        return await coord.get(b, "k") is None

    await eventually(gone, message="the bucket's age to take the value")
    assert await coord.keys(b) == []
    await coord.create(b, "k", b"again")  # an aged-out key is free


async def test_a_value_put_updated_or_deleted_in_an_aged_bucket_ages_out_alike(backend, coord):
    b = await _bucket(coord, "crewlet_aged", max_age=backend.short_age)
    await coord.put(b, "put", b"v")
    rev = await coord.create(b, "updated", b"v")
    await coord.update(b, "updated", b"w", rev)
    await coord.create(b, "deleted", b"v")
    await coord.delete(b, "deleted")
    assert await coord.get(b, "deleted") is None
    assert await coord.keys(b) == ["put", "updated"]
    backend.elapse(backend.short_age)

    async def gone() -> bool:
        return await coord.keys(b) == []

    await eventually(gone, message="the bucket's age to take every value")
    assert await coord.get(b, "put") is None and await coord.get(b, "updated") is None


async def test_a_value_created_with_a_ttl_expires_alone(backend, coord):
    b = await _bucket(coord)
    await coord.create(b, "short", b"v", ttl=backend.short_age)
    await coord.create(b, "kept", b"v")
    backend.elapse(backend.short_age)

    async def gone() -> bool:
        return await coord.get(b, "short") is None

    await eventually(gone, message="the value's own ttl to take it")
    assert await coord.keys(b) == ["kept"]


async def test_nodes_provisioning_one_bucket_at_once_agree_on_it(backend, coord):
    # Each asks for its own age; whoever made it first decides, and every node adopts that.
    stores = [coord] + [await backend.store(f"node-{n}") for n in "bcd"]
    ages = [60.0, 120.0, 180.0, 240.0]
    made = await asyncio.gather(*(s.ensure_bucket("crewlet_raced", max_age=age) for s, age in zip(stores, ages, strict=True)))
    assert len({info.max_age for info in made}) == 1 and made[0].max_age in ages
    assert all(info.name == "crewlet_raced" for info in made)
    for s in stores:
        assert (await s.ensure_bucket("crewlet_raced")).max_age == made[0].max_age


async def test_an_existing_bucket_is_adopted_as_found(coord):
    first = await coord.ensure_bucket("crewlet_adopted", max_age=3600)
    again = await coord.ensure_bucket("crewlet_adopted", max_age=60)
    assert first.max_age == again.max_age == 3600
    assert first.name == again.name == "crewlet_adopted"
    plain = await coord.ensure_bucket("crewlet_plain")
    assert plain.max_age is None


@pytest.mark.parametrize("max_age", [0, -1])
async def test_a_bucket_age_that_is_not_positive_is_refused(coord, max_age):
    with pytest.raises(CoordError) as refused:
        await coord.ensure_bucket("crewlet_ageless", max_age=max_age)
    assert str(refused.value) == f"coord: bucket crewlet_ageless: max_age {max_age!r} must be positive, or None"


@pytest.mark.parametrize("ttl", [0, -5])
async def test_a_ttl_that_is_not_positive_is_refused(coord, ttl):
    b = await _bucket(coord)
    with pytest.raises(CoordError) as refused:
        await coord.create(b, "k", b"v", ttl=ttl)
    assert str(refused.value) == f"coord: ttl {ttl!r}: a lifetime must be positive"
    assert await coord.get(b, "k") is None


async def test_every_call_on_an_unprovisioned_bucket_names_it_missing(coord):
    for call in (coord.get("crewlet_nowhere", "k"), coord.create("crewlet_nowhere", "k", b"v"),
                 coord.update("crewlet_nowhere", "k", b"v", 1), coord.put("crewlet_nowhere", "k", b"v"),
                 coord.delete("crewlet_nowhere", "k"), coord.keys("crewlet_nowhere")):
        with pytest.raises(BucketNotFound) as refused:
            await call
        assert str(refused.value) == "coord: crewlet_nowhere: no such bucket"


async def test_bad_names_are_refused(coord):
    with pytest.raises(InvalidName) as refused:
        await coord.ensure_bucket("leases")
    assert str(refused.value) == "coord: bucket 'leases': a coordination bucket is named crewlet_<name> (letters, digits, '_' and '-')"
    b = await _bucket(coord)
    with pytest.raises(InvalidName) as refused:
        await coord.create(b, "", b"v")
    assert str(refused.value) == "coord: key '': a key is a non-empty string"
    with pytest.raises(CoordError):
        await coord.create(b, "k", "not bytes")  # type: ignore[arg-type]


async def test_a_store_that_does_not_answer_is_unavailable_never_empty(backend, coord):
    b = await _bucket(coord)
    await coord.create(b, "seat:alice", b"v")
    await backend.outage()
    for call in (coord.get(b, "seat:alice"), coord.keys(b), coord.create(b, "seat:bob", b"v"),
                 coord.update(b, "seat:alice", b"w", 1), coord.delete(b, "seat:alice")):
        with pytest.raises(Unavailable):
            await call


async def test_a_ping_is_answered_while_the_store_serves_and_not_once_it_stops(backend, coord):
    assert await coord.ping(2.0) is True
    await backend.outage()
    assert await coord.ping(0.5) is False  # an answer, never an exception: the node's probes read it


async def test_a_closed_store_answers_nothing(coord):
    b = await _bucket(coord)
    await coord.close()
    with pytest.raises(Unavailable):
        await coord.get(b, "k")


async def test_a_rewrite_sets_the_value_s_lifetime_afresh(backend, coord):
    b = await _bucket(coord)
    rev = await coord.create(b, "kept", b"v", ttl=backend.short_age)
    await coord.update(b, "kept", b"w", rev)  # no ttl: this value has none
    await coord.put(b, "short", b"v")
    await coord.put(b, "short", b"w", ttl=backend.short_age)
    renewed = await coord.create(b, "renewed", b"v")
    await coord.update(b, "renewed", b"w", renewed, ttl=backend.short_age)  # a renewal carrying a ttl
    backend.elapse(backend.short_age)

    async def gone() -> bool:
        return await coord.get(b, "short") is None and await coord.get(b, "renewed") is None

    await eventually(gone, message="the rewritten value's ttl to take it")
    assert (await coord.get(b, "kept")).value == b"w"
