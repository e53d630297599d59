"""The dashboard's HTML screens."""
from __future__ import annotations

urlpatterns: list = []
