"""The Company page's org chart: the seats as a tree by `reports_to` (seed 000, "Routing": the
company is an org chart of seats, people and agents).

A seat reporting to nobody, or to a handle the company does not have, is a root; the company
document refuses a reporting cycle (engine.config.company_rules), so every seat is drawn once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Node:
    """One seat in the chart and the seats reporting to it, in the document's order."""

    handle: str
    kind: str
    role: str
    title: str
    reports: list["Node"] = field(default_factory=list)


def tree(company: Any) -> list[Node]:
    """The company's seats as reporting trees, roots first in the document's order."""
    seats = list(company.org.seats)
    nodes = {s.handle: Node(s.handle, s.kind, s.role or "", s.title or "") for s in seats}
    roots: list[Node] = []
    for seat in seats:
        boss = nodes.get(seat.reports_to or "")
        if boss is None or boss.handle == seat.handle:
            roots.append(nodes[seat.handle])
        else:
            boss.reports.append(nodes[seat.handle])
    return roots
