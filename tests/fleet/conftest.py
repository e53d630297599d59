from __future__ import annotations

import pytest

from tests.node.harness import NodeProcess


@pytest.fixture
def nodes(tmp_path):
    """Make node processes (`nodes("node-1")`); every one is stopped after the test."""
    made: list[NodeProcess] = []

    def make(node_id: str = "node-1") -> NodeProcess:
        node = NodeProcess(home=tmp_path / node_id, node_id=node_id)
        made.append(node)
        return node

    yield make
    for node in made:
        node.stop()
