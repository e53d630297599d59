"""Checking a schedule's cron expression when the company document loads.

The scheduler fires `schedules` on the company's clock (seed 000, "Routing": the scheduler
resolves a firing schedule's target seat and publishes `task_assigned`). An expression it
could not parse would never fire and say nothing, so the document refuses it at load.
Standard five fields (minute hour day-of-month month day-of-week) with `*`, lists, ranges,
steps and English month / weekday names, or one of the `@daily`-style shorthands.
"""
from __future__ import annotations

SHORTHANDS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")

_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]

# (name, low, high, names mapped to numbers)
_FIELDS = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, {name: i + 1 for i, name in enumerate(_MONTHS)}),
    ("day of week", 0, 7, {name: i for i, name in enumerate(_DAYS)}),  # 0 and 7 are Sunday
)


def cron_problem(expression: str) -> str | None:
    """None when expression is a cron schedule; otherwise what is wrong with it."""
    text = expression.strip()
    if text.lower() in SHORTHANDS:
        return None
    parts = text.split()
    if len(parts) != 5:
        return (f"expected five fields (minute hour day-of-month month day-of-week) or one of "
                f"{', '.join(SHORTHANDS)}, got {len(parts)} field{'s' if len(parts) != 1 else ''}")
    for part, (name, low, high, names) in zip(parts, _FIELDS, strict=True):
        for item in part.split(","):
            problem = _item_problem(item.lower(), low, high, names)
            if problem:
                return f"the {name} field {part!r}: {problem}"
    return None


def _item_problem(item: str, low: int, high: int, names: dict[str, int]) -> str | None:
    body, _, step = item.partition("/")
    if step and (not step.isdigit() or int(step) == 0):
        return f"step {step!r} is not a positive number"
    if body == "*":
        return None
    start, dash, end = body.partition("-")
    values = [start, end] if dash else [start]
    numbers = []
    for value in values:
        number = names.get(value, int(value) if value.isdigit() else None)
        if number is None:
            return f"{value!r} is not a number{' or a name' if names else ''}"
        if not low <= number <= high:
            return f"{number} is outside {low}-{high}"
        numbers.append(number)
    if dash and numbers[0] > numbers[1]:
        return f"the range {body!r} runs backwards"
    return None
