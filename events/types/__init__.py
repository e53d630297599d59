"""The registered event types, one module per category (seed 002, "What gets stored").

Importing this package registers every type.
"""
from events.types import task  # noqa: F401
