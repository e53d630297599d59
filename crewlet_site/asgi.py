"""The ASGI application: HTTP through Django, WebSockets through Channels."""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crewlet_site.settings")

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_app = get_asgi_application()

application = ProtocolTypeRouter({"http": django_app, "websocket": URLRouter([])})
