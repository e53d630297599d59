"""The events app's errors: one base, one subclass per condition (STYLE.md, "Errors")."""
from __future__ import annotations


class EventError(Exception):
    """An event that cannot be decoded or built. Names the type and the field."""

    prefix = "events"

    def __init__(self, message: str, *, event_type: str | None = None, field: str | None = None) -> None:
        self.event_type = event_type
        self.field = field
        super().__init__(f"{self.prefix}: {message}")


class EventDecodeError(EventError):
    """The bytes are not an event: not JSON, not an object, or a field breaks its type's schema."""


class EventTypeError(EventError):
    """A registration problem: a type registered twice, or a field that collides with the envelope."""
