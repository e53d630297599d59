"""The running node, as request handlers reach it.

One process runs one node; the HTTP surface (Django views, Channels consumers) runs on the
node's own event loop and asks it for the queue, the coordination store and the company
through this registry rather than through globals scattered across apps.
"""
from __future__ import annotations

from typing import Any

_node: Any = None


class NodeNotRunning(Exception):
    def __init__(self) -> None:
        super().__init__("engine: this process runs no node (start it with `manage.py crewlet_node`)")


def set_node(node: Any) -> None:
    global _node
    _node = node


def clear_node(node: Any) -> None:
    global _node
    if _node is node:
        _node = None


def node() -> Any:
    """The running node; NodeNotRunning when none is."""
    if _node is None:
        raise NodeNotRunning()
    return _node


def current() -> Any | None:
    return _node
