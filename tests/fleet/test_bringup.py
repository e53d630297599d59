"""The coordination bring-up asks again on silence, inside one budget (engine.node.bringup;
seed 002, "A request the broker never answers is asked again, not waited on")."""
from __future__ import annotations

import pytest

from engine.coord.contract import KeyExists, Unavailable
from engine.node.bringup import CLUSTERED_BUDGET_SECONDS, SOLO_BUDGET_SECONDS, BringUp
from engine.node.errors import BootError

pytestmark = pytest.mark.timeout(30)


def test_the_budget_is_the_seeds_two_minutes_solo_and_five_on_a_cluster():
    assert (BringUp(clustered=False).budget_seconds, BringUp(clustered=True).budget_seconds) == \
        (SOLO_BUDGET_SECONDS, CLUSTERED_BUDGET_SECONDS) == (120.0, 300.0)


async def test_silence_is_asked_again_until_it_answers():
    calls = []

    async def read_pointer():
        calls.append(1)
        if len(calls) < 3:
            raise Unavailable("crewlet_config: the broker did not answer (TimeoutError)")
        return "pointer"

    assert await BringUp(clustered=True).step("the active revision", read_pointer) == "pointer"
    assert len(calls) == 3


async def test_a_refusal_is_an_answer_and_fails_at_once():
    calls = []

    async def create():
        calls.append(1)
        raise KeyExists("crewlet_leases node:a: already holds revision 3")

    with pytest.raises(KeyExists):
        await BringUp(clustered=True).step("the presence lease", create)
    assert len(calls) == 1


async def test_silence_past_the_budget_fails_the_boot_naming_the_step():
    async def silent():
        raise Unavailable("crewlet_leases: the broker did not answer (TimeoutError)")

    with pytest.raises(BootError, match=r"^coordination: the lease buckets: .*nothing answered within the bring-up's 2.5s"):
        await BringUp(clustered=False, budget_seconds=2.5).step("the lease buckets", silent)
