"""The seats app's errors: one base, a subclass per condition (STYLE.md, "Errors").

`detail` is what an HTTP answer or a dashboard message says; `str()` carries the app's prefix.
A `SeatRefused` carries the HTTP status its REST route answers with, so the dashboard and the
route refuse alike."""
from __future__ import annotations


class SeatsError(Exception):
    """Base of the seats app's own errors."""

    prefix = "seats"

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"{self.prefix}: {detail}")


class SeatRefused(SeatsError):
    """A request about a seat that cannot be answered as asked; `status` is the HTTP answer."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        super().__init__(detail)
