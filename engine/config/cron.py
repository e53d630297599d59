"""A schedule's cron expression: checked when the company document loads, and read by the
scheduler for its due times (seed 000, "Routing": the scheduler resolves a firing schedule's
target seat and publishes `task_assigned`; DESIGN.md, "Configuration": schedules fire on the
company's clock).

The expression is evaluated by `cronsim` (the parser Healthchecks runs), chosen over croniter
because it matches Debian cron's behaviour across daylight-saving changes -- a 02:30 job in
a zone that skips 02:00-03:00 runs once at 03:00, and one in the repeated hour runs once --
which is what a person who wrote a crontab expects; it reads zoneinfo zones natively and
iterates backwards as well as forwards. Accepted: the standard five fields (minute hour
day-of-month month day-of-week) with `*`, lists, ranges, steps, English month and weekday
names, `L`, `W` and `#`; six fields, the first being seconds (cronsim's extension: such an
expression skips Debian's daylight-saving quirks); and the `@daily`-style shorthands, which
are Vixie cron's names for five-field expressions. An expression that could never fire is
refused here, naming the field, rather than waiting in silence.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo
from typing import Iterator

from cronsim import CronSim, CronSimError

# Vixie cron's shorthands (crontab(5)); @reboot has no due time, so it is not one of them.
SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIVE = ("minute", "hour", "day-of-month", "month", "day-of-week")
_RANGES = {"second": "0-59", "minute": "0-59", "hour": "0-23", "day-of-month": "1-31, L or LW",
           "month": "1-12 or jan-dec", "day-of-week": "0-7 or sun-sat, with L or #"}
_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)


def expand(expression: str) -> str:
    """The expression cronsim reads: a shorthand replaced by its five fields."""
    text = " ".join(expression.split())
    return SHORTHANDS.get(text.lower(), text)


def _field_names(parts: list[str]) -> tuple[str, ...]:
    return (("second",) + _FIVE) if len(parts) == 6 else _FIVE


def cron_problem(expression: str) -> str | None:
    """None when `expression` is a schedule the scheduler can fire; otherwise what is wrong
    with it, naming the field."""
    text = expand(expression or "")
    parts = text.split()
    if text.lower() == "@reboot":
        return "@reboot has no due time on a company's clock; give a schedule such as @daily or 0 9 * * 1-5"
    if len(parts) not in (5, 6):
        return (f"expected five fields (minute hour day-of-month month day-of-week), six with a leading "
                f"seconds field, or one of {', '.join(SHORTHANDS)}; got {len(parts)} field{'s' if len(parts) != 1 else ''}")
    try:
        it = CronSim(text, _EPOCH)
    except CronSimError as exc:
        return _named(str(exc), parts)
    try:
        next(it)
    except StopIteration:
        return "it never fires (no date within fifty years matches every field)"
    return None


def _named(message: str, parts: list[str]) -> str:
    """cronsim's "Bad minute" as a refusal naming the field, its text and what it accepts."""
    names = _field_names(parts)
    for name, part in zip(names, parts, strict=True):
        if message == f"Bad {name}":
            return f"the {name} field {part!r} is not valid (it takes {_RANGES[name]}, *, lists, ranges and steps)"
    return message


def fires_after(expression: str, tz: tzinfo, after: datetime) -> Iterator[datetime]:
    """The expression's due times strictly after `after`, on the clock `tz`, in UTC, ascending."""
    # cronsim drops the microseconds and steps one second before it matches, so what it yields
    # is strictly after `after`.
    start = after.astimezone(tz)
    for due in CronSim(expand(expression), start):
        yield due.astimezone(timezone.utc)


def next_fires(expression: str, tz: tzinfo, after: datetime, count: int = 3) -> list[datetime]:
    """The next `count` due times after `after` (fewer when the expression runs out)."""
    out: list[datetime] = []
    for due in fires_after(expression, tz, after):
        out.append(due)
        if len(out) >= count:
            break
    return out


def due_between(expression: str, tz: tzinfo, after: datetime, until: datetime, *, cap: int) -> tuple[datetime | None, int]:
    """The latest due time in (after, until] and how many due times that span holds, counted up to
    `cap` (a schedule down for a week at one fire a second is not walked second by second)."""
    latest, counted = None, 0
    for due in fires_after(expression, tz, after):
        if due > until:
            break
        latest, counted = due, counted + 1
        if counted >= cap:
            last = previous_fire(expression, tz, until)
            return (last if last is not None else latest), counted
    return latest, counted


def previous_fire(expression: str, tz: tzinfo, at: datetime) -> datetime | None:
    """The latest due time at or before `at`, in UTC; None when there is none."""
    # cronsim's reverse is strict too: start a second past `at` so `at` itself can answer.
    start = at.astimezone(tz).replace(microsecond=0) + timedelta(seconds=1)
    try:
        due = next(CronSim(expand(expression), start, reverse=True))
    except StopIteration:
        return None
    return due.astimezone(timezone.utc)
