"""Finding 9: with an https `api.external_url` the session and CSRF cookies were not Secure,
there was no HSTS, a browser sign-in behind the TLS proxy was refused by the CSRF check
(trusted origins never came from external_url) and `api.trusted_proxies` was never used. Now
crewlet_site.browser derives them all from external_url, and the listener believes X-Forwarded-*
from the trusted proxies alone (engine.server)."""
from __future__ import annotations

import pytest

from crewlet_site.browser import HSTS_SECONDS
from tests.notify import deliveries as d
from tests.security.conftest import ProxiedNode, Session, make_user, no_traceback, still_ready

pytestmark = pytest.mark.timeout(120)

ORIGIN = "https://crewlet.example"
THROUGH_PROXY = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7", "Origin": ORIGIN,
                 "Referer": ORIGIN + "/dashboard/login/", "Host": "crewlet.example"}
USER, PASSWORD = "operator", "an-operator-password-0123"


def _node(home, proxies: tuple[str, ...]) -> ProxiedNode:
    node = ProxiedNode(home=home / "node-1")
    node.trusted_proxies = proxies
    node.start(company=d.company_yaml(), env=d.ENV)
    node.wait_ready()
    make_user(node, USER, PASSWORD)
    return node


@pytest.fixture(scope="module")
def behind_proxy(tmp_path_factory):
    node = _node(tmp_path_factory.mktemp("proxied"), ("127.0.0.1",))
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def untrusted(tmp_path_factory):
    node = _node(tmp_path_factory.mktemp("untrusted"), ("192.0.2.1",))  # a proxy that is not this peer
    try:
        yield node
    finally:
        node.stop()


def _set_cookies(headers) -> list[str]:
    return headers.get_all("Set-Cookie") or []


def test_a_sign_in_through_the_tls_proxy_passes_csrf_and_lands_on_the_dashboard(behind_proxy):
    session = Session(behind_proxy.base, THROUGH_PROXY)
    status, headers, text = session.sign_in(USER, PASSWORD)
    assert status == 302, text[:500]
    assert headers["Location"] == "/dashboard/"
    cookies = _set_cookies(headers)
    session_cookie = next(c for c in cookies if c.startswith("__Host-sessionid="))
    assert "Secure" in session_cookie and "HttpOnly" in session_cookie and "Path=/" in session_cookie
    assert headers["Strict-Transport-Security"] == f"max-age={HSTS_SECONDS}"
    status, _, _ = session.request("GET", "/dashboard/")
    assert status == 200
    still_ready(behind_proxy)


def test_the_csrf_cookie_is_secure_and_host_prefixed(behind_proxy):
    status, headers, _ = Session(behind_proxy.base, THROUGH_PROXY).request("GET", "/dashboard/login/")
    assert status == 200
    csrf = next(c for c in _set_cookies(headers) if c.startswith("__Host-csrftoken="))
    assert "Secure" in csrf


def test_forwarded_headers_from_a_peer_that_is_not_a_trusted_proxy_are_not_believed(untrusted):
    status, headers, _ = Session(untrusted.base, THROUGH_PROXY).request("GET", "/dashboard/login/")
    assert status == 200
    assert "Strict-Transport-Security" not in headers  # the request is plain http: no https claim
    # The cookies stay Secure (external_url says https), so a browser never sends them over http.
    assert any(c.startswith("__Host-csrftoken=") and "Secure" in c for c in _set_cookies(headers))
    no_traceback(untrusted)


def test_a_post_from_another_origin_is_still_refused(behind_proxy):
    other = {**THROUGH_PROXY, "Origin": "https://evil.example", "Referer": "https://evil.example/"}
    session = Session(behind_proxy.base, other)
    status, _, _ = session.sign_in(USER, PASSWORD)
    assert status == 403
    no_traceback(behind_proxy)
