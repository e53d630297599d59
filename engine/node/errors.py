"""The engine's errors and the node's exit codes (seed 002: 1 for a connection closed for
good, 69 for a broker that died, 75 for the watchdog; 2 for a configuration refusal)."""
from __future__ import annotations

EXIT_OK, EXIT_FATAL, EXIT_CONFIG, EXIT_BROKER_DIED = 0, 1, 2, 69


class EngineError(Exception):
    """Base of the engine's own errors."""


class BootError(EngineError):
    """The boot cannot go on; the message names the address, path or field."""

    def __init__(self, message: str, exit_code: int = EXIT_FATAL) -> None:
        self.exit_code = exit_code
        super().__init__(message)
