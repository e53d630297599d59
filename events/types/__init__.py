"""The registered event types, one module per category (seed 002, "What gets stored").

Importing this package registers every type. Which category each is filed under, or why it
is not stored, is `events.categories`; a test fails when a registered type is neither.
"""
from events.types import (  # noqa: F401  (registration side effect)
    a2a,
    auth,
    decision,
    learning,
    lifecycle,
    notification,
    placement,
    system,
    task,
    wakes,
    webhook,
)
