"""Token budgets: ceilings per calendar window, per seat and per company (seed 002, "Token
Budgets"; seed 000, "Event Types": budget_exhausted, budget_meters).

Every model round is charged against both scopes -- the company's `token_budget` and the
seat's -- in every window at once: the day, the ISO week (Monday first) and the calendar month
it falls in on the company's clock (`company.tz`). Every scope is counted, capped or not, so a
ceiling added part-way through a day judges what the day already spent, and GET /budgets shows
an uncapped company's spend.

- `check` asks, before a round, whether every capped window still has room (spend < ceiling):
  a full window turns the work away before its first call, since that call would be billed
  and then refused.
- `charge` records a round's tokens (its size is known only once it happened) and refuses it
  when it took any capped window past its ceiling. The refused round stays counted: the vendor
  billed it, so the refusing window reads past its ceiling by the round that crossed it.
- There is no reset: a window's allowance comes back when the window turns over, which is
  simply a new counter key (the old one ages out on its TTL), so nothing has to run at midnight.

The counters live in the coordination store, bucket `crewlet_budgets`, one key per scope and
window (`company:day:2026-11-29`, `seat:alice:week:2026-W48`, `company:month:2026-11`), each a
JSON {spend, refused_at} advanced by compare-and-set, so a ceiling of 500 k is 500 k across
every node. The company's counters are charged before the seat's: a seat write that fails after
the company's landed leaves the billed round on the company and is logged as
`coord_kv_budget_spend_uncounted`. `Unavailable` from the store is never a refusal: it raises,
and the host defers the delivery.

A charge is on every model round's path, so it costs two store round trips, not twelve: a
scope's three windows are written together (three keys, independent of each other), and each
write is a compare-and-set against the revision this node last wrote there, read first only
when it has none or another writer moved the counter since (the lost race reads it and adds on
top, so the figure is the same either way).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from datetime import time as clock_time
from typing import Any, Callable
from zoneinfo import ZoneInfo

from engine.config.company import Company, Seat, TokenBudget
from engine.coord.contract import CoordError, CoordStore, KeyExists, RevisionMismatch

log = logging.getLogger("seats.budgets")

BUDGETS_BUCKET = "crewlet_budgets"
PERIODS = ("day", "week", "month")
# A counter outlives its window by a day, so a reader straddling the turn of a window (or a
# node whose clock is a little behind) still finds the one it means.
TTL_GRACE_SECONDS = 24 * 3600.0
# Compare-and-set retries before a counter write is given up as an outage: each lost race means
# another charge landed, so this many in a row is a store that is not settling.
CAS_ATTEMPTS = 64


@dataclass(frozen=True)
class Window:
    """One calendar window on the company's clock: its label and when it turns over (UTC)."""

    period: str
    label: str
    starts_at: datetime
    resets_at: datetime


@dataclass(frozen=True)
class Refusal:
    """A capped window with no room: the scope (`company` or `seat`, with the seat's `handle`),
    the window (`period`, `window` label, `resets_at` in UTC) and its figures."""

    scope: str
    period: str
    window: str
    spend: int
    ceiling: int
    resets_at: datetime
    handle: str = ""

    def as_fields(self) -> dict[str, Any]:
        """The budget_exhausted event's fields."""
        return {"scope": self.scope, "period": self.period, "window": self.window,
                "resets_at": self.resets_at, "spend": self.spend, "ceiling": self.ceiling}


def next_reset(refusal: Refusal) -> datetime:
    """When the refusing window turns over and its allowance comes back (UTC)."""
    return refusal.resets_at


def window_for(period: str, now: float, tz: ZoneInfo) -> Window:
    """The `period` window holding instant `now` (seconds since the epoch) on clock `tz`."""
    today = datetime.fromtimestamp(now, tz).date()
    if period == "day":
        start, end, label = today, today + timedelta(days=1), today.isoformat()
    elif period == "week":
        start = today - timedelta(days=today.weekday())
        iso = today.isocalendar()
        end, label = start + timedelta(days=7), f"{iso.year}-W{iso.week:02d}"
    elif period == "month":
        start = today.replace(day=1)
        end = date(start.year + (start.month == 12), start.month % 12 + 1, 1)
        label = f"{start.year}-{start.month:02d}"
    else:
        raise ValueError(f"budget period {period!r} is not one of {PERIODS}")
    return Window(period, label, _midnight(start, tz), _midnight(end, tz))


def _midnight(day: date, tz: ZoneInfo) -> datetime:
    return datetime.combine(day, clock_time(0), tzinfo=tz).astimezone(timezone.utc)


def counter_key(scope: str, period: str, label: str, handle: str = "") -> str:
    """`company:day:2026-11-29` or `seat:alice:week:2026-W48`."""
    return f"{scope}:{handle}:{period}:{label}" if scope == "seat" else f"{scope}:{period}:{label}"


@dataclass
class _Counter:
    spend: int = 0
    refused_at: float | None = None

    def encode(self) -> bytes:
        return json.dumps({"spend": self.spend, "refused_at": self.refused_at}).encode()

    @classmethod
    def decode(cls, key: str, raw: bytes) -> "_Counter":
        try:
            doc = json.loads(raw)
            return cls(spend=int(doc.get("spend") or 0), refused_at=doc.get("refused_at"))
        except (ValueError, TypeError, AttributeError):
            log.warning("budget_counter_unreadable", extra={"key": key})
            return cls()


@dataclass(frozen=True)
class _Scope:
    name: str  # company | seat
    handle: str
    budget: TokenBudget


class Budgets:
    """The fleet's token counters over a coordination store; `clock` is seconds since the epoch."""

    def __init__(self, coord: CoordStore, *, clock: Callable[[], float] = time.time) -> None:
        self.coord = coord
        self.clock = clock
        self._provisioned = False
        self._refusal_listeners: list[Callable[[Refusal], None]] = []
        # The revision and spend this node last wrote on each current counter (charges guess it
        # is still the latest), the counter each (scope, handle, period) is on, and the keys
        # another writer moved since: those are read before they are written.
        self._written: dict[str, tuple[int, int]] = {}
        self._slots: dict[tuple[str, str, str], str] = {}
        self._moved: set[str] = set()

    def add_refusal_listener(self, listener: Callable[[Refusal], None]) -> None:
        """Call listener(refusal) whenever `check` or `charge` turns work away (seats.meters
        publishes budget_meters at once the first time a window does)."""
        self._refusal_listeners.append(listener)

    def _refused(self, refusal: Refusal | None) -> Refusal | None:
        if refusal is not None:
            for listener in self._refusal_listeners:
                try:
                    listener(refusal)
                except Exception:  # a listener's bug never turns into the gate's answer
                    log.exception("budget_refusal_listener_failed")
        return refusal

    async def provision(self) -> None:
        """Create the bucket if missing (values age out on their own TTL, not the bucket's)."""
        await self.coord.ensure_bucket(BUDGETS_BUCKET)
        self._provisioned = True

    async def check(self, company: Company, seat: Seat | None) -> Refusal | None:
        """Is there room before a round? None, or the refusal of a capped window already full
        (where several are, the one that turns over last: waiting for it frees them all)."""
        await self._ready()
        now = self.clock()
        refusals: list[Refusal] = []
        for scope in _scopes(company, seat):
            for period, ceiling in scope.budget.windows().items():
                window = window_for(period, now, company.tz)
                key = counter_key(scope.name, period, window.label, scope.handle)
                entry = await self.coord.get(BUDGETS_BUCKET, key)
                spend = _Counter.decode(key, entry.value).spend if entry else 0
                if spend >= ceiling:
                    refusals.append(_refusal(scope, window, spend, ceiling))
        if refusals:
            await self._mark_refused(refusals, now, company.tz)
        return self._refused(_pick(refusals))

    async def charge(self, company: Company, seat: Seat | None, tokens: int) -> Refusal | None:
        """Record one round's `tokens` on every window of both scopes. None when every capped
        window had room for it; else the Refusal (the round stays counted)."""
        await self._ready()
        now = self.clock()
        refusals: list[Refusal] = []
        for scope in _scopes(company, seat):  # the company's landed before the seat's is written
            ceilings = scope.budget.windows()
            windows = [window_for(period, now, company.tz) for period in PERIODS]
            spends = await asyncio.gather(*(self._add(scope, w, max(0, int(tokens)), ceilings.get(w.period), now)
                                            for w in windows), return_exceptions=True)
            failed: BaseException | None = None
            for window, spend in zip(windows, spends, strict=True):
                if isinstance(spend, BaseException):
                    if isinstance(spend, CoordError) and scope.name == "seat":  # an outage, never a refusal
                        log.warning("coord_kv_budget_spend_uncounted",
                                    extra={"agent": scope.handle, "period": window.period, "window": window.label,
                                           "tokens": tokens})
                    failed = failed or spend
                    continue
                ceiling = ceilings.get(window.period)
                if ceiling is not None and spend > ceiling:
                    refusals.append(_refusal(scope, window, spend, ceiling))
            if failed is not None:
                raise failed
        return self._refused(_pick(refusals))

    async def snapshot(self, company: Company) -> dict[str, Any]:
        """Every scope's windows for GET /budgets: {"company": {period: {...}}, "seats": {handle:
        {period: {...}}}}, each window with its label, spend, ceiling (None when uncapped),
        state (uncapped, open, refusing), resets_at and refused_at (ISO 8601, UTC)."""
        await self._ready()
        now = self.clock()
        out: dict[str, Any] = {"company": await self._scope_snapshot(_Scope("company", "", company.token_budget),
                                                                     now, company.tz), "seats": {}}
        for seat in company.agent_seats():
            out["seats"][seat.handle] = await self._scope_snapshot(_Scope("seat", seat.handle, seat.token_budget),
                                                                   now, company.tz)
        return out

    async def meter_windows(self, company: Company) -> list[dict[str, Any]]:
        """Every capped window of the company and of its agent seats, flat, as budget_meters
        carries them: {scope, agent_handle, period, window, spend, ceiling, state, resets_at,
        refused_at}. Uncapped windows are not read (GET /budgets shows those)."""
        await self._ready()
        now = self.clock()
        scopes = [_Scope("company", "", company.token_budget)]
        scopes += [_Scope("seat", seat.handle, seat.token_budget) for seat in company.agent_seats()]
        out: list[dict[str, Any]] = []
        for scope in scopes:
            capped = scope.budget.windows()
            if not capped:
                continue
            for period, window in (await self._scope_snapshot(scope, now, company.tz, only=capped)).items():
                out.append({"scope": scope.name, "agent_handle": scope.handle, "period": period, **window})
        return out

    # -- inside -------------------------------------------------------------------------------

    async def _ready(self) -> None:
        if not self._provisioned:
            await self.provision()

    async def _add(self, scope: _Scope, window: Window, tokens: int, ceiling: int | None, now: float) -> int:
        """Compare-and-set `tokens` onto one counter; the spend after it. A window this charge took
        past its ceiling records when it refused; one that admitted it clears that."""
        key = counter_key(scope.name, window.period, window.label, scope.handle)
        ttl = max(1.0, window.resets_at.timestamp() - now + TTL_GRACE_SECONDS)
        known = self._written.get(key) if key not in self._moved else None
        for _ in range(CAS_ATTEMPTS):
            if known is None:
                entry = await self.coord.get(BUDGETS_BUCKET, key)
                revision = entry.revision if entry else None
                spent = _Counter.decode(key, entry.value).spend if entry else 0
            else:  # what this node wrote last: the update proves it is still the latest, or reads
                revision, spent = known
            counter = _Counter(spend=spent + tokens)
            counter.refused_at = now if ceiling is not None and counter.spend > ceiling else None
            try:
                if revision is None:
                    written = await self.coord.create(BUDGETS_BUCKET, key, counter.encode(), ttl=ttl)
                else:
                    written = await self.coord.update(BUDGETS_BUCKET, key, counter.encode(), revision, ttl=ttl)
            except (KeyExists, RevisionMismatch):
                # another writer landed first: read it and add ours on top; while they do, this
                # key is read before it is written (a guess that keeps losing costs a round trip)
                if known is not None:
                    self._moved.add(key)
                known = None
                continue
            if known is None and self._written.get(key, (None,))[0] == revision:
                self._moved.discard(key)  # nobody else wrote it since this node did: guess again
            self._remember(scope, window, key, written, counter.spend)
            return counter.spend
        raise CoordError(f"budget counter {key}: {CAS_ATTEMPTS} compare-and-set attempts in a row lost the race")

    def _remember(self, scope: _Scope, window: Window, key: str, revision: int, spend: int) -> None:
        """Keep the revision this node wrote on `key`, one per scope and period (the window
        before it is forgotten when it turns over)."""
        slot = (scope.name, scope.handle, window.period)
        before = self._slots.get(slot)
        if before is not None and before != key:
            self._written.pop(before, None)
            self._moved.discard(before)
        self._slots[slot] = key
        self._written[key] = (revision, spend)

    async def _mark_refused(self, refusals: list[Refusal], now: float, tz: ZoneInfo) -> None:
        """Record when the gate turned work away, on the scope a charge would be refused by (the
        company's before the seat's). Best effort: a lost race means a charge just rewrote it."""
        scope = refusals[0].scope
        for refusal in (r for r in refusals if r.scope == scope):
            key = counter_key(refusal.scope, refusal.period, refusal.window, refusal.handle)
            entry = await self.coord.get(BUDGETS_BUCKET, key)
            if entry is None:
                continue
            counter = _Counter.decode(key, entry.value)
            counter.refused_at = now
            ttl = max(1.0, refusal.resets_at.timestamp() - now + TTL_GRACE_SECONDS)
            try:
                await self.coord.update(BUDGETS_BUCKET, key, counter.encode(), entry.revision, ttl=ttl)
            except RevisionMismatch:
                pass

    async def _scope_snapshot(self, scope: _Scope, now: float, tz: ZoneInfo, only: Any = PERIODS) -> dict[str, Any]:
        ceilings = scope.budget.windows()
        out: dict[str, Any] = {}
        for period in (p for p in PERIODS if p in only):
            window = window_for(period, now, tz)
            key = counter_key(scope.name, period, window.label, scope.handle)
            entry = await self.coord.get(BUDGETS_BUCKET, key)
            counter = _Counter.decode(key, entry.value) if entry else _Counter()
            ceiling = ceilings.get(period)
            state = "uncapped" if ceiling is None else ("refusing" if counter.spend >= ceiling else "open")
            out[period] = {
                "window": window.label, "spend": counter.spend, "ceiling": ceiling, "state": state,
                "resets_at": window.resets_at.isoformat(),
                "refused_at": (datetime.fromtimestamp(counter.refused_at, timezone.utc).isoformat()
                               if counter.refused_at is not None else None),
            }
        return out


def capped(company: Company, seat: Seat | None) -> bool:
    """Whether any window of the company or of `seat` has a ceiling (else no charge can refuse)."""
    return any(scope.budget.windows() for scope in _scopes(company, seat))


def _scopes(company: Company, seat: Seat | None) -> list[_Scope]:
    """The scopes a round is charged to, the company's first."""
    scopes = [_Scope("company", "", company.token_budget)]
    if seat is not None:
        scopes.append(_Scope("seat", seat.handle, seat.token_budget))
    return scopes


def _refusal(scope: _Scope, window: Window, spend: int, ceiling: int) -> Refusal:
    return Refusal(scope=scope.name, period=window.period, window=window.label, spend=spend,
                   ceiling=ceiling, resets_at=window.resets_at, handle=scope.handle)


def _pick(refusals: list[Refusal]) -> Refusal | None:
    """The refusal to act on: the window that turns over last (until then something still
    refuses), the company's before the seat's on a tie."""
    if not refusals:
        return None
    return max(refusals, key=lambda r: (r.resets_at, r.scope == "company"))
