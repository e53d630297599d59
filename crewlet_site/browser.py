"""What a browser is told, decided by `api.external_url` (seed 002, "Running the Engine + API":
"the session cookie's Secure flag, its __Host- prefix, the origin every write is checked
against ... all come from this one value", because behind a TLS-terminating proxy the engine
cannot read the scheme off the request it receives).

`browser_settings(config)` returns the Django settings that follow from it, applied by
`crewlet_site.settings`:
- an https external URL: session and CSRF cookies `Secure` with the `__Host-` prefix, and
  HSTS for a year on every request that arrived over https (a trusted proxy's
  X-Forwarded-Proto says so: `engine.server`);
- `CSRF_TRUSTED_ORIGINS`: the external URL's origin, so a sign-in through the proxy passes
  the CSRF origin check although the Host the node sees is its own;
- a Content-Security-Policy (django-csp) that admits this origin's own scripts, styles,
  images and sockets and nothing else: no inline script, no frame, no plugin, no form posted
  elsewhere. The dashboard's pages carry no inline script or style.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from csp.constants import NONE, SELF

# A year: the figure HSTS preload lists ask for; shorter pins nothing a browser remembers.
HSTS_SECONDS = 365 * 24 * 3600

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],  # the /ws/stream socket: same origin (CSP 3 matches ws: and wss:)
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
# The API docs page (Swagger UI, served from the django-ninja package's own static files)
# styles its elements inline; that one page may.
DOCS_CSP_UPDATE = {"style-src": [SELF, "'unsafe-inline'"]}


def origin_of(url: str | None) -> str | None:
    """`scheme://host[:port]` of a URL, or None for one without both."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"


def browser_settings(config: Any) -> dict[str, Any]:
    """The cookie, HSTS, CSRF-origin and CSP settings for a node config (None: a plain http node)."""
    external = getattr(getattr(config, "api", None), "external_url", None)
    origin = origin_of(external)
    secure = bool(origin and origin.startswith("https://"))
    return {
        "SESSION_COOKIE_SECURE": secure,
        "CSRF_COOKIE_SECURE": secure,
        # __Host-: only ever set over https, for this host and path /, never by a sibling domain.
        "SESSION_COOKIE_NAME": "__Host-sessionid" if secure else "sessionid",
        "CSRF_COOKIE_NAME": "__Host-csrftoken" if secure else "csrftoken",
        "SECURE_HSTS_SECONDS": HSTS_SECONDS if secure else 0,
        "CSRF_TRUSTED_ORIGINS": [origin] if origin else [],
        "CONTENT_SECURITY_POLICY": CONTENT_SECURITY_POLICY,
    }


def docs_page():
    """django-ninja's Swagger page, whose response carries DOCS_CSP_UPDATE."""
    from ninja.openapi.docs import Swagger

    class DocsPage(Swagger):
        def render_page(self, request, api, **kwargs):
            response = super().render_page(request, api, **kwargs)
            response._csp_update = DOCS_CSP_UPDATE  # read by csp.middleware.CSPMiddleware
            return response

    return DocsPage()
