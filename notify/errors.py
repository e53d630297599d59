"""The notify app's errors: one base, a subclass per condition (STYLE.md, "Errors").

`detail` is what an HTTP answer or a skip row says; `str()` carries the app's prefix, as a log
line or a traceback shows it."""
from __future__ import annotations


class NotifyError(Exception):
    """Base of notify's own errors."""

    prefix = "notify"

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"{self.prefix}: {detail}")
