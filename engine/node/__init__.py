"""The node: one process running the consume loops, the seat hosts, the singleton duties and the
HTTP surface (seed 002, "Running the Engine + API"; DESIGN.md, "Shape").

`process.Node` is the node itself, its boot steps named methods in order; `applier` brings it a
company revision; `surface` wraps the site's ASGI application for it (probes, the public
listener, and the hand-over that puts the node in every request's scope); `server` serves that
on the node's one event loop. The apps below never import this package: each states what it
needs of the node as its own `typing.Protocol` (docs/architecture.md).
"""
from engine.node.errors import EXIT_BROKER_DIED, EXIT_CONFIG, EXIT_FATAL, EXIT_OK, BootError, EngineError
from engine.node.process import Node, NodeTimings

__all__ = ["EXIT_BROKER_DIED", "EXIT_CONFIG", "EXIT_FATAL", "EXIT_OK", "BootError", "EngineError", "Node", "NodeTimings"]
