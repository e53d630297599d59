"""Requests handed a node, as the node's ASGI layer hands them (engine.node.surface): Django's
async test client with the node in every request's scope."""
from __future__ import annotations

from typing import Any

from django.test import AsyncClient

from engine.node.surface import SCOPE_KEY


class NodeClient(AsyncClient):
    """An AsyncClient whose requests carry `node` (None: a process that runs no node)."""

    def __init__(self, node: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.node = node

    def _base_scope(self, **request: Any) -> dict[str, Any]:
        scope = super()._base_scope(**request)
        if self.node is not None:
            scope[SCOPE_KEY] = self.node
        return scope
