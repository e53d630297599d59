"""What a node runs beside its own loops, by role (seed 002, "Running the Engine + API":
`seats` runs the agents, `ingress` serves webhooks and the dashboard, `workers` runs the
singleton duties).

Each app contributes one service class implementing `NodeService`; the node builds the ones
its roles ask for and tells them about the company and its seats. The node wires; the apps
implement (DESIGN.md: `seats`, `notify`, `dashboard` <- `engine`).
"""
from __future__ import annotations

import importlib
import logging
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger("engine.services")


@runtime_checkable
class NodeService(Protocol):
    """A part of the node with a life of its own. Every hook is optional except start/stop."""

    name: str

    async def start(self) -> None:
        """Begin work; called once the node serves (after the company applied)."""

    async def stop(self, cut: bool) -> None:
        """Finish in-flight work and let go. `cut`: nothing can be acknowledged any more (the
        broker or its connection is gone), so give up at once instead of finishing."""


# (module, class, roles that run it). A module that does not exist yet is skipped quietly.
SERVICES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("dashboard.projection", "LiveProjection", frozenset({"ingress"})),
    ("notify.service", "NotificationService", frozenset({"ingress", "workers"})),
    ("seats.runtime", "SeatRuntime", frozenset({"seats"})),
    ("seats.duties", "MaintenanceDuty", frozenset({"workers"})),
    ("seats.meters", "BudgetMetersPublisher", frozenset({"data", "seats", "ingress", "workers"})),  # every node
)


def build_services(node: Any) -> list[NodeService]:
    """The services this node's roles ask for, each built with the node."""
    out = []
    for module_name, class_name, roles in SERVICES:
        if not roles & set(node.roles):
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        out.append(getattr(module, class_name)(node))
    return out


async def call_hook(service: Any, hook: str, *args: Any) -> None:
    """Call an optional hook; a hook that fails is logged and never stops the node."""
    fn = getattr(service, hook, None)
    if fn is None:
        return
    try:
        await fn(*args)
    except Exception:
        log.exception("service_hook_failed", extra={"service": getattr(service, "name", type(service).__name__), "hook": hook})
