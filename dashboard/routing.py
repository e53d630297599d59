"""The dashboard's WebSocket routes: `/ws/stream` (seed 000, "Broadcast Streams")."""
from __future__ import annotations

from django.urls import path

from dashboard.consumers import StreamConsumer

websocket_urlpatterns: list = [
    path("ws/stream", StreamConsumer.as_asgi()),
]
