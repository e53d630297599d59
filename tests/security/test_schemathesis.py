"""The whole API against generated input (schemathesis, from the node's own /api/openapi.json):
with the admin token, the read token and none, no route of a real node answers 5xx. A bounded
number of examples per route keeps the run well under a minute."""
from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.node.harness import ADMIN, READER
from tests.security.conftest import no_traceback, still_ready

pytestmark = pytest.mark.timeout(300)

EXAMPLES_PER_ROUTE = 12  # Hypothesis examples per operation; each is sent with all three credentials
CREDENTIALS = {"admin": ADMIN, "read": READER, "none": None}


@pytest.fixture(scope="module")
def api_schema(node):
    return schemathesis.openapi.from_url(node.base + "/api/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_ROUTE, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_no_route_answers_a_server_error_whatever_it_is_sent(case, node):
    for who, token in CREDENTIALS.items():
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = case.call(base_url=node.base, headers=headers, timeout=30)
        assert response.status_code < 500, (who, case.method, case.formatted_path, response.status_code,
                                             response.text[:500])


def test_the_node_is_ready_and_logged_no_traceback_after_it(node):
    still_ready(node)
    no_traceback(node)
