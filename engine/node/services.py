"""What a node runs beside its own loops, by role (seed 002, "Running the Engine + API":
`seats` runs the agents, `ingress` serves webhooks and the dashboard, `workers` runs the
singleton duties; every node publishes its budget meters).

`Services` names each service the node may run, typed, so the node calls the one it means --
a new revision goes to the projection and the seat hosts, a seat's placement to the seat
hosts -- and starts them in order and stops them in reverse. Each is built with the node
itself, which it sees through its app's own Protocol of the node (DESIGN.md).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from dashboard.projection import LiveProjection
from notify.service import NotificationService
from seats.duties import MaintenanceDuty
from seats.meters import BudgetMetersPublisher
from seats.runtime import SeatRuntime
from seats.scheduler import SchedulerDuty
from seats.tools.servers import ToolServers

if TYPE_CHECKING:
    from engine.node.process import Node

log = logging.getLogger("engine.node.services")


class NodeService(Protocol):
    """A part of the node with a life of its own."""

    name: str

    async def start(self) -> None:
        """Begin work; called once the node serves (after the company applied)."""

    async def stop(self, cut: bool) -> None:
        """Finish in-flight work and let go. `cut`: nothing can be acknowledged any more (the
        broker or its connection is gone), so give up at once instead of finishing."""


@dataclass
class Services:
    """The services one node runs; None where its roles run no such service."""

    projection: LiveProjection | None = None
    notifications: NotificationService | None = None
    seats: SeatRuntime | None = None
    maintenance: MaintenanceDuty | None = None
    scheduler: SchedulerDuty | None = None
    meters: BudgetMetersPublisher | None = None

    def started_in_order(self) -> list[NodeService]:
        """Every service this node runs, in the order they start (the drain stops them in reverse)."""
        return [s for s in (self.projection, self.notifications, self.seats, self.maintenance, self.scheduler, self.meters)
                if s is not None]


def build_services(node: "Node") -> Services:
    """The services `node.roles` ask for, each built with the node."""
    roles = set(node.roles)
    return Services(
        projection=LiveProjection(node) if "ingress" in roles else None,
        notifications=NotificationService(node) if roles & {"ingress", "workers"} else None,
        seats=SeatRuntime(node, tool_servers=_tool_servers(node)) if "seats" in roles else None,
        maintenance=MaintenanceDuty(node, **duty_timings(node.env, MAINTENANCE_ENV)) if "workers" in roles else None,
        scheduler=SchedulerDuty(node, **duty_timings(node.env, SCHEDULER_ENV)) if "workers" in roles else None,
        meters=BudgetMetersPublisher(node, tick_seconds=node.timings.budget_meters_seconds),  # every node
    )


def _tool_servers(node: "Node") -> ToolServers:
    """The company's MCP tool servers, as the seat hosts' turns call them; their state is what
    /health reports (`NodeState.tool_servers`). stdio commands run from the node's working
    directory, as `tools.mcp[].command` paths in the example are written."""

    def report(servers: tuple[dict, ...]) -> None:
        node.state.tool_servers = tuple(servers)

    return ToolServers(cwd=Path.cwd(), report=report)


# Tests only: a process
# test shortens the duties' timings through the node's environment; a node in production keeps
# the seed's numbers (the maintenance sweep a minute, an A2A channel an hour idle and a week kept).
MAINTENANCE_ENV = {"sweep_seconds": "CREWLET_MAINTENANCE_SWEEP_SECONDS",
                   "a2a_idle_seconds": "CREWLET_A2A_IDLE_CLOSE_SECONDS",
                   "a2a_retain_seconds": "CREWLET_A2A_RETAIN_CLOSED_SECONDS"}
SCHEDULER_ENV = {"tick_seconds": "CREWLET_SCHEDULER_TICK_SECONDS"}


def duty_timings(env: Mapping[str, str] | None, names: dict[str, str]) -> dict[str, Any]:
    """The keyword arguments the environment names (positive numbers only; anything else is
    logged and left to the default)."""
    env = env if env is not None else os.environ
    out: dict[str, Any] = {}
    for argument, variable in names.items():
        raw = env.get(variable)
        if not raw:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = 0.0
        if value > 0:
            out[argument] = value
        else:
            log.warning("duty_timing_unrecognised", extra={"variable": variable, "given": raw})
    return out
