"""The a2a app's errors: one base, a subclass per condition (STYLE.md, "Errors").

`detail` is what an HTTP answer says; `str()` carries the app's prefix. An `A2ARefused` carries
the HTTP status its REST route answers with. A refused ask is not an error: `a2a.service.ask`
returns it as an `AskOutcome` the model reads as its tool result."""
from __future__ import annotations


class A2AError(Exception):
    """Base of the a2a app's own errors."""

    prefix = "a2a"

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"{self.prefix}: {detail}")


class A2ARefused(A2AError):
    """A request about a channel that cannot be answered as asked; `status` is the HTTP answer."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        super().__init__(detail)
