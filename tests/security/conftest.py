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
    """No log line above debug carries a traceback (the node logs at debug in tests, where
    Django's template engine narrates the lookups it tries), and nothing else printed one."""
    import json

    for line in node.log_text().splitlines():
        try:
            record = json.loads(line) if line.startswith("{") else None
        except ValueError:
            record = None
        if record is not None and record.get("level") == "DEBUG":
            continue
        assert "Traceback" not in line, line[:3000]


def make_user(node: NodeProcess, username: str, password: str) -> None:
    """A superuser in the node's own store (manage.py createsuperuser against its config)."""
    import subprocess
    import sys

    from tests.node.harness import ROOT, clean_env

    env = {**clean_env(), "CREWLET_CONFIG": str(node.home / "crewlet.yaml"), "DJANGO_SUPERUSER_USERNAME": username,
           "DJANGO_SUPERUSER_PASSWORD": password, "DJANGO_SUPERUSER_EMAIL": f"{username}@example.com"}
    made = subprocess.run([sys.executable, "manage.py", "createsuperuser", "--noinput"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr


class Session:
    """A browser's cookies and forms over urllib: enough to sign in and read a page. Cookies
    are kept by hand and sent whatever their Secure flag, as a TLS proxy in front would."""

    def __init__(self, base: str, headers: dict | None = None) -> None:
        import urllib.request

        self.base = base
        self.headers = headers or {}
        self.cookies: dict[str, str] = {}
        self.opener = urllib.request.build_opener(_NoRedirect())

    def cookie(self, suffix: str) -> str:
        return next((v for k, v in self.cookies.items() if k.endswith(suffix)), "")

    def request(self, method: str, path: str, form: dict | None = None, headers: dict | None = None):
        """(status, headers, text); redirects are returned, not followed."""
        import urllib.error
        import urllib.parse
        import urllib.request

        data = urllib.parse.urlencode(form).encode() if form is not None else None
        sent = {**self.headers, **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=sent)
        if data is not None:
            request.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with self.opener.open(request, timeout=30) as response:
                status, got, text = response.status, response.headers, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as err:
            status, got, text = err.code, err.headers, err.read().decode("utf-8", "replace")
        for cookie in got.get_all("Set-Cookie") or []:
            name, _, rest = cookie.partition("=")
            self.cookies[name.strip()] = rest.split(";", 1)[0]
        return status, got, text

    def sign_in(self, username: str, password: str, path: str = "/dashboard/login/", headers: dict | None = None):
        """POST the sign-in form (after GET for its CSRF cookie); (status, headers, text)."""
        self.request("GET", path, headers=headers)
        token = self.cookie("csrftoken")
        return self.request("POST", path, {"username": username, "password": password, "csrfmiddlewaretoken": token},
                            headers=headers)


import urllib.request as _urllib_request  # noqa: E402


class _NoRedirect(_urllib_request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class ProxiedNode(NodeProcess):
    """A node reached at `external_url` through a TLS-terminating proxy at `trusted_proxies`."""

    external_url: str = "https://crewlet.example"
    trusted_proxies: tuple[str, ...] = ()

    def write(self, **config):
        path = super().write(**config)
        text = path.read_text().replace(f'external_url: "http://127.0.0.1:{self.port}"',
                                        f'external_url: "{self.external_url}"\n  trusted_proxies: {list(self.trusted_proxies)}')
        path.write_text(text)
        return path
