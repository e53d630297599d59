"""Finding 10: sign-in had no throttle or lockout (160 wrong passwords answered normally), and
password hashing on Django's one sync thread slowed GET /events from 8 ms to 0.95 s meanwhile.
Now django-axes locks a login from a client address after AXES_FAILURE_LIMIT failures, and the
sign-in views hash on threads of their own (dashboard.signin); the latency figures are
benchmarks/surface.py's."""
from __future__ import annotations

import threading

import pytest
from django.conf import settings

from tests.node.harness import READER
from tests.security.conftest import ProxiedNode, Session, make_user, no_traceback, still_ready
from tests.notify import deliveries as d

pytestmark = pytest.mark.timeout(180)

USER, PASSWORD = "maya", "the-real-password-0123"
ORIGIN = "https://crewlet.example"


def _client(node, address: str) -> Session:
    return Session(node.base, {"X-Forwarded-Proto": "https", "X-Forwarded-For": address, "Origin": ORIGIN,
                               "Host": "crewlet.example"})


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    made = ProxiedNode(home=tmp_path_factory.mktemp("signin") / "node-1")
    made.trusted_proxies = ("127.0.0.1",)
    made.start(company=d.company_yaml(), env=d.ENV)
    try:
        made.wait_ready()
        make_user(made, USER, PASSWORD)
        yield made
    finally:
        made.stop()


def test_wrong_passwords_lock_the_login_from_that_address_even_for_the_right_one(node):
    attacker = _client(node, "203.0.113.7")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        status, _, text = attacker.sign_in(USER, "wrong-password")
        assert status == 200 and "do not match" in text  # the form again, saying so
    status, _, text = attacker.sign_in(USER, "wrong-password")
    assert status == 429, text[:300]
    status, _, _ = attacker.sign_in(USER, PASSWORD)
    assert status == 429  # locked: the right password is not even checked
    status, _, _ = attacker.sign_in(USER, PASSWORD, path="/admin/login/")
    assert status == 429  # the admin's sign-in is the same lock
    still_ready(node)


def test_the_owner_signing_in_from_their_own_address_is_not_locked_out(node):
    owner = _client(node, "198.51.100.20")
    status, headers, _ = owner.sign_in(USER, PASSWORD)
    assert status == 302 and headers["Location"] == "/dashboard/"


def test_the_api_keeps_answering_during_a_flood_of_sign_ins(node):
    answers: list[int] = []

    def guess(i: int) -> None:
        answers.append(_client(node, f"192.0.2.{i}").sign_in(USER, f"guess-{i}")[0])

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(1, 13)]
    for thread in threads:
        thread.start()
    reads = []
    while any(t.is_alive() for t in threads):
        reads.append(node.get("/events?limit=5", token=READER)[0])
    for thread in threads:
        thread.join(60)
    assert answers == [200] * 12
    assert reads and set(reads) == {200}
    still_ready(node)
    no_traceback(node)
