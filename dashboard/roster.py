"""The seats the screens show, following the active revision (seed 000, "Routing": agent ids
are derived from the company and the handle, so an event that names only its agent id is
still placed on its seat)."""
from __future__ import annotations

from engine.config import Company
from events.envelope import Event
from dashboard.seatstate import SeatView


class Roster:
    """The company's seats as views, kept in org-chart order. A seat that stays across a new
    revision keeps its state; a new one starts blank; a removed one goes."""

    def __init__(self) -> None:
        self.company: Company | None = None
        self.seats: dict[str, SeatView] = {}
        self._handles: dict[str, str] = {}  # agent id -> handle

    def follow(self, company: Company) -> None:
        """Take the revision's seats, keeping the views of those that stay."""
        self.company = company
        self._handles = {str(company.agent_id_for(s.handle)): s.handle for s in company.org.seats}
        seats = {}
        for seat in company.org.seats:
            view = self.seats.get(seat.handle) or SeatView(seat.handle)
            view.kind, view.role, view.title = seat.kind, seat.role or "", seat.title or ""
            view.reports_to = seat.reports_to or ""
            seats[seat.handle] = view
        self.seats = seats

    def agents(self) -> list[SeatView]:
        return [view for view in self.seats.values() if view.is_agent]

    def handle_of(self, event: Event) -> str | None:
        """The seat an event is about: by its handle, else by its agent id; None for neither."""
        handle = event.get("agent_handle")
        if handle and handle in self.seats:
            return handle
        return self.handle_for(str(event.get("agent_id") or ""))

    def handle_for(self, agent_id: str) -> str | None:
        if agent_id in self.seats:
            return agent_id
        return self._handles.get(agent_id)
