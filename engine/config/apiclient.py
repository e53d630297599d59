"""A running node's REST API, as the operator commands reach it (`crewlet_task`,
`crewlet_schedule`, `crewlet_a2a`).

The embedded broker is private to the running node (a per-boot token that never leaves the
process), so a command that acts on the company goes through the node's API, which builds the
events with the same functions its routes call. The address is `--url`, else the node's own
listener as its Tier A file says: `http://{api.host}:{api.port}` (a wildcard host is reached on
127.0.0.1) -- the port the node binds, whatever `api.external_url` says a browser uses. The
token is CREWLET_API_TOKEN (or `--token`, which other users can see in a process listing).
Every failure is an `ApiClientError` naming the flag or setting to fix.
"""
from __future__ import annotations

import os
from typing import Any


class ApiClientError(Exception):
    """The command cannot reach or use the node's API; the message names what to fix."""


def api_url(config: Any) -> str | None:
    """The node's own API address from its Tier A config, None when it serves none."""
    api = config.api
    if not api.port:
        return None
    host = api.host if api.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"http://{host}:{api.port}"


class ApiClient:
    """`request()` against one node; built from a command's --url/--token and the Tier A file."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        self.token = token

    @classmethod
    def from_options(cls, tier_a: Any, url: str | None, token: str | None, *, needs: str) -> "ApiClient":
        """`tier_a` is settings.NODE (crewlet_site.nodeconfig); `needs` says what the token is for."""
        if not url:
            if tier_a.config is None:
                error = tier_a.load_error or "no config was given"
                raise ApiClientError(f"--config: cannot read the node's API address ({error}); or pass --url")
            url = api_url(tier_a.config)
            if not url:
                raise ApiClientError("api.port: the node serves no API (port 0); pass --url of a node that does")
        token = token or os.environ.get("CREWLET_API_TOKEN")
        if not token:
            raise ApiClientError(f"CREWLET_API_TOKEN: a token is needed to {needs} (or pass --token)")
        return cls(url, token)

    def request(self, method: str, path: str, body: dict | None = None, params: dict | None = None) -> tuple[int, Any]:
        """The status and the decoded JSON answer (`{"detail": ...}` for a body that is not JSON)."""
        import httpx

        try:
            response = httpx.request(method, f"{self.url}{path}", json=body, params=params,
                                     headers={"Authorization": f"Bearer {self.token}"}, timeout=30)
        except httpx.HTTPError as exc:
            raise ApiClientError(f"--url {self.url}: the node did not answer ({exc}); is it running, on this port?") from None
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, {"detail": response.text[:200]}
