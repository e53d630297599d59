"""The ASGI application: webhooks through notify's edge, other HTTP through Django, WebSockets
through Channels. The node serves it wrapped in its own layer (engine.node.surface), which puts
the node in every request's scope; `ASGI_APPLICATION` names it to the node's command."""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crewlet_site.settings")

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_app = get_asgi_application()

from dashboard.routing import websocket_urlpatterns as websocket_routes  # noqa: E402
from notify.asgi import WebhookEdge  # noqa: E402
from crewlet_site.auth import configured_tokens  # noqa: E402
from engine.node.gate import RequestGate  # noqa: E402

# Webhooks are answered before Django (a vendor's delivery is the hot path: verified,
# recorded and queued in about a millisecond); everything else is Django's, behind the gate
# that checks an API token and the body's size before the body is read.
application = ProtocolTypeRouter({"http": RequestGate(WebhookEdge(django_app), tokens=configured_tokens),
                                  "websocket": AuthMiddlewareStack(URLRouter(websocket_routes))})

