"""Finding 6: Mattermost parsed the body before checking the token (one 8 MiB form blocked the
loop for about 2 s and took about 230 MB; four clients in a loop pushed /ready to a 1.4 s
median). Now a bounded scan finds the token first: without it nothing is parsed, and a parse
the sender earns is bounded too (MAX_FORM_FIELDS). Timings are benchmarks/surface.py's."""
from __future__ import annotations

import threading
from urllib.parse import urlencode

import pytest

from notify.sources.mattermost import MAX_FORM_FIELDS
from tests.notify import deliveries as d
from tests.notify.http import post
from tests.security.conftest import no_traceback, still_ready

pytestmark = pytest.mark.timeout(180)

EIGHT_MIB_FORM = b"&".join(b"f%d=v" % i for i in range(1_200_000))[: 8 * 1024 * 1024 - 64]
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def test_an_eight_mebibyte_form_without_the_token_is_refused_401_naming_it(node):
    status, body, _ = post(node, "/webhooks/mattermost", EIGHT_MIB_FORM, FORM, timeout=30)
    assert status == 401, body
    assert body["header"] == "token" and body["detail"].startswith("token: missing")


def test_a_wrong_token_in_a_large_json_body_is_refused_without_a_parse(node):
    payload = d.mattermost_post("x" * (6 * 1024 * 1024), token="not-the-token")
    status, body, _ = post(node, "/webhooks/mattermost", d.dumps(payload), d.mattermost_headers(), timeout=30)
    assert status == 401 and body["detail"] == "token: does not match the integration's token"


def test_four_clients_flooding_unsigned_forms_leave_the_node_ready(node):
    answers: list[int] = []
    ready: list[int] = []

    def flood():
        for _ in range(5):
            answers.append(post(node, "/webhooks/mattermost", EIGHT_MIB_FORM, FORM, timeout=60)[0])

    threads = [threading.Thread(target=flood) for _ in range(4)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        answer = node.probe("/ready")
        ready.append(answer[0] if answer else 0)
    for thread in threads:
        thread.join(60)
    assert answers == [401] * 20
    assert ready and set(ready) == {200}  # every probe during the flood answered ready
    still_ready(node)


def test_a_signed_form_of_too_many_fields_is_refused_400_naming_the_limit(node):
    fields = {"token": d.SECRETS["mattermost"], **{f"f{i}": "v" for i in range(MAX_FORM_FIELDS + 10)}}
    status, body, _ = post(node, "/webhooks/mattermost", urlencode(fields).encode(), FORM)
    assert status == 400, body
    assert f"more than {MAX_FORM_FIELDS} fields" in body["detail"]
    still_ready(node)
    no_traceback(node)
