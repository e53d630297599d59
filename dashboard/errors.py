"""The dashboard's errors: one base, a subclass per condition (STYLE.md, "Errors")."""
from __future__ import annotations


class DashboardError(Exception):
    """Base of the dashboard's own errors; `detail` is what a screen or a socket frame says."""

    prefix = "dashboard"

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"{self.prefix}: {detail}")


class QueryFailed(DashboardError):
    """A socket query refused: `status` and `detail` as the REST route behind it answers them."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        super().__init__(detail)
