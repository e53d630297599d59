"""Completed turns and their tokens over the last day, per minute (the Overview's "turns and
tokens in the last 24 hours", company-wide and per seat). Seeded from the store by
`events.queries.turns_by_minute`, then counted live; a minute leaves the window whole."""
from __future__ import annotations

import collections

WINDOW_MINUTES = 24 * 60  # "the last 24 hours", to the minute


class Totals:
    """Completed turns and their tokens per minute over the last day, company-wide and per seat."""

    def __init__(self) -> None:
        self.buckets: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0])
        self.per_seat: dict[str, dict[int, list[int]]] = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0]))

    def add(self, minute: int, handle: str, turns: int, tokens: int) -> None:
        for buckets in (self.buckets, self.per_seat[handle]):
            bucket = buckets[minute]
            bucket[0] += turns
            bucket[1] += tokens

    def _sum(self, buckets: dict[int, list[int]], now_minute: int) -> tuple[int, int]:
        floor = now_minute - WINDOW_MINUTES
        for minute in [m for m in buckets if m <= floor]:
            del buckets[minute]
        return sum(b[0] for b in buckets.values()), sum(b[1] for b in buckets.values())

    def company(self, now_minute: int) -> tuple[int, int]:
        return self._sum(self.buckets, now_minute)

    def seat(self, handle: str, now_minute: int) -> tuple[int, int]:
        return self._sum(self.per_seat[handle], now_minute) if handle in self.per_seat else (0, 0)
