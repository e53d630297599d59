"""Logging for a node (seed 002, "Logging" and "Structured Logging").

- Levels debug | info | warn | error; formats console (columns, colour only on a
  terminal), text (key=value) and json (one object per line, the message under `msg`).
- Every line carries `component` (the logger's name); `trace_id`/`span_id` appear on lines
  emitted inside a span and are absent otherwise (never an empty placeholder).
- An optional log file in addition to stderr (`engine.node.logfile`): rotated by size at every
  `max_backups`, 0600 in 0700 directories, a failure announced once on the console and its
  recovery once more.
- console adapts to its sink: colour only on a live terminal (CREWLET_LOG_COLOR=always|never
  overrides, NO_COLOR suppresses), and the full date on a line that is read later -- a
  redirected stream or a file -- where a terminal's carry the wall-clock time alone.
- A flag overrides the file only when given; an unrecognised level or format in a flag
  falls back to the default with a `log_level_unrecognised` / `log_format_unrecognised`
  warning, while the file refuses it (engine.config validation).
- Secrets never reach a log line: every configured secret value is redacted from the
  rendered line by `SecretRedactor`.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable

from opentelemetry import trace

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "warning": logging.WARNING, "error": logging.ERROR}
FORMATS = ("console", "text", "json")
_LEVEL_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN", logging.ERROR: "ERROR", logging.CRITICAL: "ERROR"}
_COLOURS = {"DEBUG": "\x1b[90m", "INFO": "\x1b[36m", "WARN": "\x1b[33m", "ERROR": "\x1b[31m"}
_RESET = "\x1b[0m"

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName", "trace_id", "span_id"}


def record_fields(record: logging.LogRecord) -> dict:
    """The structured attributes a call passed through `extra=`."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class TraceFilter(logging.Filter):
    """Adds trace_id/span_id from the current span; leaves them off outside a span."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            record.trace_id = format(ctx.trace_id, "032x")
            record.span_id = format(ctx.span_id, "016x")
        return True


class SecretRedactor(logging.Filter):
    """Replaces any configured secret value in a record's message and fields with [redacted]."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "[redacted]")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        record.msg = self.scrub(record.getMessage())
        record.args = ()
        for key, value in record_fields(record).items():
            if isinstance(value, str):
                setattr(record, key, self.scrub(value))
        return True


def _time(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _exception_text(formatter: logging.Formatter, record: logging.LogRecord) -> str | None:
    if record.exc_info:
        return formatter.formatException(record.exc_info)
    return None


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"time": _time(record), "level": _LEVEL_NAMES.get(record.levelno, record.levelname), "msg": record.getMessage(), "component": record.name}
        out.update(record_fields(record))
        for key in ("trace_id", "span_id"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        exc = _exception_text(self, record)
        if exc:
            out["error"] = exc
        return json.dumps(out, default=str, ensure_ascii=False)


def _kv(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(text) if (" " in text or "=" in text or '"' in text or not text) else text


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [f"time={_time(record)}", f"level={_LEVEL_NAMES.get(record.levelno, record.levelname)}",
                 f"msg={_kv(record.getMessage())}", f"component={record.name}"]
        parts += [f"{k}={_kv(v)}" for k, v in record_fields(record).items()]
        parts += [f"{k}={getattr(record, k)}" for k in ("trace_id", "span_id") if hasattr(record, k)]
        exc = _exception_text(self, record)
        if exc:
            parts.append(f"error={_kv(exc)}")
        return " ".join(parts)


class ConsoleFormatter(logging.Formatter):
    """Fixed columns: time, level, component, event, then the attributes. `dated` puts the
    full date in the time column (a line read later); a terminal gets the time alone."""

    def __init__(self, colour: bool, dated: bool = True) -> None:
        super().__init__()
        self.colour = colour
        self.dated = dated

    def format(self, record: logging.LogRecord) -> str:
        level = _LEVEL_NAMES.get(record.levelno, record.levelname)
        stamp = _time(record) if self.dated else datetime.fromtimestamp(record.created, timezone.utc).strftime("%H:%M:%S.%f")[:-3]
        shown = f"{level:<5}"
        if self.colour:
            shown = f"{_COLOURS.get(level, '')}{shown}{_RESET}"
        fields = " ".join(f"{k}={_kv(v)}" for k, v in record_fields(record).items())
        trace_part = " ".join(f"{k}={getattr(record, k)}" for k in ("trace_id", "span_id") if hasattr(record, k))
        line = f"{stamp} {shown} {record.name:<18} {record.getMessage()}"
        for extra in (fields, trace_part):
            if extra:
                line += "  " + extra
        exc = _exception_text(self, record)
        return line + ("\n" + exc if exc else "")


def formatter_for(fmt: str, stream=None, env=None) -> logging.Formatter:
    """The formatter of `fmt` for a sink: `stream` is the console's stream, None for a file
    (never a terminal, so never coloured, whatever CREWLET_LOG_COLOR says)."""
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return TextFormatter()
    if stream is None:
        return ConsoleFormatter(colour=False, dated=True)
    isatty = bool(hasattr(stream, "isatty") and stream.isatty())
    return ConsoleFormatter(colour=_colour(isatty, os.environ if env is None else env), dated=not isatty)


def _colour(isatty: bool, env) -> bool:
    """Colour on a live terminal; CREWLET_LOG_COLOR=always|never overrides; NO_COLOR (any
    non-empty value) suppresses it, as it does for every other tool."""
    if env.get("NO_COLOR"):
        return False
    choice = (env.get("CREWLET_LOG_COLOR") or "").strip().lower()
    if choice in ("always", "never"):
        return choice == "always"
    return isatty


@dataclass
class LogSettings:
    level: str = "info"
    format: str = "console"
    stderr: bool = True
    file_path: str | None = None
    file_format: str | None = None
    file_level: str | None = None
    max_size_mb: int = 100
    max_backups: int = 5


def resolve_flag(value: str | None, accepted: Iterable[str], default: str, what: str, warnings: list[tuple[str, dict]]) -> str | None:
    """A flag's value, or default with a warning when the build does not recognise it."""
    if value is None:
        return None
    lowered = value.strip().lower()
    accepted = tuple(accepted)
    if lowered in accepted:
        return lowered
    warnings.append((f"log_{what}_unrecognised", {"given": value, "used": default, "accepted": ", ".join(accepted)}))
    return default


def settings_from(config_logging, *, level_flag: str | None = None, format_flag: str | None = None, debug: bool = False,
                  file_flag: str | None = None) -> tuple[LogSettings, list[tuple[str, dict]]]:
    """Fold the Tier A `logging:` block and the run's flags into one answer (flags win when given)."""
    warnings: list[tuple[str, dict]] = []
    s = LogSettings()
    if config_logging is not None:
        s.level = config_logging.level
        s.format = config_logging.format
        s.stderr = config_logging.stderr
        f = getattr(config_logging, "file", None)
        if f is not None:
            s.file_path = f.path
            s.file_format = f.format or None
            s.file_level = f.level or None
            s.max_size_mb = f.max_size_mb
            s.max_backups = f.max_backups
    level = resolve_flag(level_flag, ("debug", "info", "warn", "error"), "info", "level", warnings)
    if level is not None:
        s.level = level
    elif debug:
        s.level = "debug"  # -debug only ever raises
    fmt = resolve_flag(format_flag, FORMATS, "console", "format", warnings)
    if fmt is not None:
        s.format = fmt
    if file_flag is not None:
        s.file_path = file_flag or None
    return s, warnings


def _announce(console: list[logging.Handler], stream, name: str, fields: dict) -> None:
    """Say something about the log file on the console: through the console handler when the
    node has one (so a json stream stays json), else as one plain line on stderr. Never
    through the root logger -- a sink cannot report its own failure through itself."""
    record = logging.LogRecord("engine.node.logfile", logging.WARNING, __file__, 0, name, (), None)
    record.__dict__.update(fields)
    if console:
        for handler in console:
            handler.handle(record)
        return
    detail = " ".join(f"{k}={_kv(v)}" for k, v in fields.items())
    try:
        stream.write(f"crewlet: {name} {detail}\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def configure(settings: LogSettings, secrets: Iterable[str] = (), stream=None) -> logging.Logger:
    """Install the node's handlers on the root logger; returns the root logger."""
    stream = stream or sys.stderr
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    redactor = SecretRedactor(secrets)
    tracer = TraceFilter()
    levels = [LEVELS[settings.level]]
    if settings.stderr or not settings.file_path:
        handler = logging.StreamHandler(stream)
        handler.setLevel(LEVELS[settings.level])
        handler.setFormatter(formatter_for(settings.format, stream))
        handler.addFilter(tracer)
        handler.addFilter(redactor)
        root.addHandler(handler)
    if settings.file_path:
        from engine.node.logfile import LogFile

        console = [h for h in root.handlers if isinstance(h, logging.StreamHandler)]
        fh = LogFile(settings.file_path, max_bytes=settings.max_size_mb * 1024 * 1024, max_backups=settings.max_backups,
                     announce=lambda name, fields: _announce(console, stream, name, fields))
        file_level = LEVELS[settings.file_level or settings.level]
        levels.append(file_level)
        fh.setLevel(file_level)
        fh.setFormatter(formatter_for(settings.file_format or settings.format))
        fh.addFilter(tracer)
        fh.addFilter(redactor)
        root.addHandler(fh)
    root.setLevel(min(levels))
    # Libraries stay quieter than the engine unless asked.
    for noisy in ("asyncio", "uvicorn", "websockets", "django", "nats"):
        logging.getLogger(noisy).setLevel(max(min(levels), logging.WARNING) if settings.level != "debug" else logging.DEBUG)
    return root
