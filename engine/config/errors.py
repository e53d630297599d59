"""The configuration error, and the wording every refusal shares.

STYLE.md, "Errors": one base error per app with a prefix (`config: ...`), and a
configuration error names the field path and what would fix it
(`stream.cluster.name: a cluster block needs a name, or remove stream.cluster`).
Seed 002, "Logging": a value the build does not recognise is refused in the file "with
the field path", by `crewlet validate` and at boot.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Iterable, Sequence

PREFIX = "config: "

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_\-]+$")


class ConfigError(Exception):
    """A configuration that cannot be used.

    `.problems` holds every refusal found, each `field.path: message`; str() is one line
    per problem, each prefixed `config: `.
    """

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: list[str] = list(problems) or ["the configuration was refused"]
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(PREFIX + p for p in self.problems)


class ConfigFileError(ConfigError):
    """The file could not be read, or is not YAML; the problem names the path (and line)."""


class ConfigInvalid(ConfigError):
    """The document was read and refused: one problem per field that is wrong."""


def field_path(loc: Sequence[object], root: str = "") -> str:
    """Render a location as the path an operator writes: `org.seats[2].handle`.

    A mapping key that is not a plain word is quoted (`users["alice@nimbus.example"]`),
    so a path can always be read back as one.
    """
    out = root
    for part in loc:
        if isinstance(part, bool) or part is None:
            out += f"[{json.dumps(part)}]"  # a YAML key that is not text: users: {true: x}
        elif isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(str(part)):
            out += f".{part}" if out else str(part)
        else:
            out += f"[{json.dumps(str(part))}]"
    return out or "(top level)"


def describe_value(value: object) -> str:
    """Render what the file said, for `..., got X`: text quoted, YAML words for the rest."""
    reference = getattr(value, "reference", None)
    suffix = f" (from {reference})" if reference else ""
    if value is None:
        return "nothing" + suffix
    if isinstance(value, bool):
        return ("true" if value else "false") + suffix
    if isinstance(value, (int, float)):
        return repr(value) + suffix
    if isinstance(value, str):
        shown = value if len(value) <= 80 else value[:77] + "..."
        return json.dumps(shown, ensure_ascii=False) + suffix
    if isinstance(value, dict):
        return "a mapping" + suffix
    if isinstance(value, (list, tuple)):
        return "a list" + suffix
    if isinstance(value, (_dt.date, _dt.datetime)):
        return f"the date {value.isoformat()}"
    return type(value).__name__ + suffix


def redacted(value: object) -> str:
    """What a secret field's `got` says: its kind and size, never its text."""
    if isinstance(value, str):
        return f"{len(value)} characters of text (not shown)"
    return describe_value(value) if value is None or isinstance(value, (bool, dict, list)) else "a value (not shown)"
