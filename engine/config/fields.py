"""The field types both documents are built from, each refusing in our own words.

Seed 002, "Logging": a value the build does not recognise is refused in the file, with
the field path. Every type here checks its own value and raises
`expected <what>, got <what the file said>`; `document.py` prefixes the path. A `${VAR}`
reference that was a number's or a boolean's whole value is read as YAML would have read
it written there (seed 002, "Environment Variable References"); a reference inside other
text is refused for those types.
"""
from __future__ import annotations

import datetime as _dt
import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from engine.config.errors import describe_value, redacted
from engine.config.expand import EmbeddedReferences, WholeReference
from engine.queue.topics import TopicError, check_handle


class Block(BaseModel):
    """A block of a document: unknown keys are refused (typo protection), values typed."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _nothing_means_default(cls, data: Any) -> Any:
        """`key:` with nothing after it reads as unset, so an optional field takes its default.

        So does a whole `${VAR}` that resolves to nothing: read as if written there, an
        empty value is YAML's null (a quoted "" in the file stays the empty text).
        """
        if isinstance(data, dict):
            fields = cls.model_fields
            return {k: v for k, v in data.items()
                    if not (_is_nothing(v) and k in fields and not fields[k].is_required())}
        return data


def _is_nothing(value: Any) -> bool:
    return value is None or (isinstance(value, WholeReference) and not value.strip())


class Expect:
    """Annotation metadata: what a field expects, for a `missing` refusal."""

    def __init__(self, text: str) -> None:
        self.text = text


def refuse(message: str) -> PydanticCustomError:
    """The error a field type raises; `document.py` turns it into `path: message`."""
    return PydanticCustomError("config", "{message}", {"message": message})


def _scalar(value: Any, expected: str) -> Any:
    """Read a whole `${VAR}` as if its value were written there; refuse an embedded one."""
    if isinstance(value, EmbeddedReferences):
        raise refuse(f"expected {expected}, got {describe_value(value)}: a ${{VAR}} reference "
                     "in a number or a boolean must be the whole value")
    if isinstance(value, WholeReference):
        try:
            parsed = yaml.safe_load(str(value)) if str(value).strip() else None
        except yaml.YAMLError:
            return value
        if parsed is None or isinstance(parsed, (bool, int, float)):
            return _Resolved(parsed, value.reference)
    return value


class _Resolved:
    """A value read out of a whole reference, remembering the reference for `got`."""

    def __init__(self, value: Any, reference: str) -> None:
        self.value, self.reference = value, reference


def _got(value: Any) -> str:
    if isinstance(value, _Resolved):
        inner = describe_value(value.value)
        return f"{inner} (from {value.reference})"
    return describe_value(value)


def _unwrap(value: Any) -> Any:
    return value.value if isinstance(value, _Resolved) else value


def _range_text(noun: str, lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"{noun} from {lo} to {hi}"
    if lo is not None:
        return f"{noun} of at least {lo}"
    if hi is not None:
        return f"{noun} of at most {hi}"
    return noun


def integer(lo: int | None = None, hi: int | None = None, because: str = "", zero: str = ""):
    """An int in [lo, hi]. `because` is appended to a range refusal; `zero` replaces it for 0."""
    expected = _range_text("an integer", lo, hi)

    def check(value: Any) -> int:
        value = _scalar(value, expected)
        raw = _unwrap(value)
        if isinstance(raw, float) and raw.is_integer():
            raw = int(raw)
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise refuse(f"expected {expected}, got {_got(value)}")
        if raw == 0 and zero and (lo is not None and lo > 0):
            raise refuse(zero)
        if (lo is not None and raw < lo) or (hi is not None and raw > hi):
            raise refuse(f"expected {expected}, got {_got(value)}" + (f" ({because})" if because else ""))
        return raw

    return Annotated[int, BeforeValidator(check), Expect(expected)]


def number(lo: float | None = None, hi: float | None = None, above: float | None = None):
    """A float in [lo, hi], or strictly above `above`."""
    expected = _range_text("a number", lo, hi) if above is None else f"a number above {above}"

    def check(value: Any) -> float:
        value = _scalar(value, expected)
        raw = _unwrap(value)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise refuse(f"expected {expected}, got {_got(value)}")
        if (lo is not None and raw < lo) or (hi is not None and raw > hi) or (above is not None and raw <= above):
            raise refuse(f"expected {expected}, got {_got(value)}")
        return float(raw)

    return Annotated[float, BeforeValidator(check), Expect(expected)]


def _check_flag(value: Any) -> bool:
    value = _scalar(value, "true or false")
    raw = _unwrap(value)
    if not isinstance(raw, bool):
        raise refuse(f"expected true or false, got {_got(value)}")
    return raw


Flag = Annotated[bool, BeforeValidator(_check_flag), Expect("true or false")]


def _text_of(value: Any, expected: str, secret: bool = False) -> str:
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # `id: 2026` means the text 2026
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    raise refuse(f"expected {expected}, got {redacted(value) if secret else describe_value(value)}")


Text = Annotated[str, BeforeValidator(lambda v: _text_of(v, "text")), Expect("text")]

class SecretMarker:
    """Annotation metadata: the field holds a credential. `engine.config.secretfields` finds
    secret fields by it, so every rendering of a document hides them (GET /config, the admin,
    the dashboard), and a document sent over the API may reference `${VAR}` only there."""


SECRET = SecretMarker()

# A credential: never echoed in a refusal, redacted from every rendering of its document.
# Declare the field with `Field(repr=False)` too, so a logged config does not show it.
Secret = Annotated[str, BeforeValidator(lambda v: _text_of(v, "text", secret=True)),
                   Expect("text (a secret: write a ${VAR} reference)"), SECRET]


def choice(*values: str, empty_is_unset: bool = False):
    """One of `values`; with `empty_is_unset`, "" reads as unset (None)."""
    expected = "one of " + ", ".join(values)

    def check(value: Any) -> str | None:
        if empty_is_unset and (value is None or value == ""):
            return None
        if not isinstance(value, str) or str(value) not in values:
            raise refuse(f"expected {expected}, got {describe_value(value)}")
        return str(value)

    kind = Literal[values] | None if empty_is_unset else Literal[values]  # type: ignore[valid-type]
    return Annotated[kind, BeforeValidator(check), Expect(expected)]


def _check_handle(value: Any) -> str:
    text = _text_of(value, "a seat handle")
    try:
        return check_handle(text)
    except TopicError:
        raise refuse(f"{describe_value(text)} cannot be a NATS subject token: a handle is lowercase "
                     "letters, digits, '_' and '-', starting with a letter or digit") from None


# Seed 000, "Routing": a handle is one token of the seat's inbox subject, so the rule is
# the one topics.check_handle applies when the subject is built.
Handle = Annotated[str, BeforeValidator(_check_handle), Expect("a seat handle")]

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float | None:
    """Seconds in a Go-style duration (`30s`, `1m30s`, `500ms`); None when it is not one."""
    text = text.strip()
    if not text:
        return None
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    return total if position == len(text) else None


def _check_sync(value: Any) -> str:
    expected = "always or a duration such as 30s"
    if isinstance(value, str) and (value == "always" or (parse_duration(value) or 0) > 0):
        return str(value)
    raise refuse(f"expected {expected}, got {describe_value(value)}")


Sync = Annotated[str, BeforeValidator(_check_sync), Expect("always or a duration such as 30s")]
