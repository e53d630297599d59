"""Finding 8: PUT /config had no guard against YAML alias expansion and parsed on the event
loop (a 456-byte document froze the node for 16 s and took it to 1.38 GB); a 10 MB body
answered 500, not 413; deeply nested YAML answered 500. Now: the depth and alias budget
(engine.config.yamlbudget) refuse by name, 422; the gate refuses a body past 1 MiB, 413."""
from __future__ import annotations

import pytest

from engine.config.yamlbudget import MAX_DEPTH, MAX_EXPANDED_NODES
from tests.node.harness import ADMIN, READER
from tests.security.conftest import no_traceback, still_ready

pytestmark = pytest.mark.timeout(120)

LAUGHS = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))


def test_a_billion_laughs_is_refused_422_naming_the_alias_budget(node):
    assert len(LAUGHS) < 500
    status, body, _ = node.put("/config", LAUGHS.encode())
    assert status == 422, body
    assert f"more than {MAX_EXPANDED_NODES} nodes (the alias budget)" in body["detail"]
    still_ready(node)


def test_deep_nesting_is_refused_422_naming_the_depth(node):
    status, body, _ = node.put("/config", ("name: x\nextra: " + "[" * 100_000).encode())
    assert status == 422, body
    assert f"nested deeper than {MAX_DEPTH} levels (the depth budget)" in body["detail"]
    still_ready(node)


def test_a_ten_megabyte_document_is_refused_413(node):
    status, body, _ = node.put("/config", b"name: x\n# " + b"x" * (10 * 1000 * 1000) + b"\n")
    assert status == 413, body
    assert "at most 1048576 bytes" in body["detail"]
    still_ready(node)
    no_traceback(node)


def test_the_active_revision_is_unchanged_by_every_refusal(node):
    status, body, _ = node.get("/config", token=READER)
    assert status == 200 and body["company"] == "nimbus"


def test_a_document_within_the_budget_using_aliases_is_taken(node):
    from tests.notify import deliveries as d

    text = d.company_yaml(extra="schedules:\n  - &daily {name: standup, seat: alice, cron: '0 9 * * *', task: sync}\n")
    status, body, _ = node.put("/config", text.encode(), token=ADMIN)
    assert status == 200, body
