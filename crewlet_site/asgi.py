"""The ASGI application: webhooks through notify's edge, other HTTP through Django, WebSockets
through Channels."""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crewlet_site.settings")

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_app = get_asgi_application()

from django.urls import Resolver404, resolve  # noqa: E402

from dashboard.routing import websocket_urlpatterns as websocket_routes  # noqa: E402
from notify.asgi import WebhookEdge  # noqa: E402
from crewlet_site.auth import configured_tokens  # noqa: E402
from engine.gate import RequestGate  # noqa: E402

# Webhooks are answered before Django (a vendor's delivery is the hot path: verified,
# recorded and queued in about a millisecond); everything else is Django's, behind the gate
# that checks an API token and the body's size before the body is read.
application = ProtocolTypeRouter({"http": RequestGate(WebhookEdge(django_app), tokens=configured_tokens),
                                  "websocket": AuthMiddlewareStack(URLRouter(websocket_routes))})


def is_route(path: str) -> bool:
    """Whether the node serves `path` once it is serving (a starting node answers 503 for these)."""
    if path.startswith("/ws/"):
        return any(getattr(r, "pattern", None) and r.pattern.match(path.lstrip("/")) for r in websocket_routes)
    try:
        resolve(path)
        return True
    except Resolver404:
        return False
