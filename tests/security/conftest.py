"""One real node per module for the attacks in tests/security: every integration connected
(secrets from the node's environment, as `${VAR}` references), the harness's two API tokens."""
from __future__ import annotations

import pytest

from tests.node.harness import NodeProcess
from tests.notify import deliveries as d


def start_node(home, *, company: str | None = None, env: dict | None = None, **config) -> NodeProcess:
    node = NodeProcess(home=home / "node-1")
    node.start(company=company or d.company_yaml(), env={**d.ENV, **(env or {})}, **config)
    node.wait_ready()
    return node


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    made = start_node(tmp_path_factory.mktemp("attacked"))
    try:
        yield made
    finally:
        made.stop()


def still_ready(node: NodeProcess) -> None:
    """The node answers /ready 200 (its presence lease held, its broker up) after an attack."""
    answer = node.probe("/ready")
    assert answer is not None and answer[0] == 200, (answer, node.log_text()[-3000:])


def no_traceback(node: NodeProcess) -> None:
    assert "Traceback" not in node.log_text(), node.log_text()[-5000:]
