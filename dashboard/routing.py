"""The dashboard's WebSocket routes (`/ws/stream`)."""
from __future__ import annotations

websocket_urlpatterns: list = []
