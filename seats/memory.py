"""Conversation memory: what a seat did on one conversation, carried into its next turn there
(seed 000, "Inbox Batching & Coalescing": "conversation sessions carry what the seat did about
them into that conversation's next turn", and "And the failed one is not answered twice").

A record per (seat, conversation identity) lives in the coordination store, so it survives a
restart and follows the seat to whichever node holds it next. It holds:
  - `exchanges`: the seat's earlier turns there, oldest first -- what it was asked, the tools it
    called with their results (clipped), and what it answered;
  - `waiting`: messages of the conversation whose turn failed and that wait for redelivery.
Both are bounded by `turns.memory_tokens` (the oldest exchanges go first), on write and again on
read, so a lowered setting applies at once. 0 turns memory off.

Only a real conversation identity is remembered: a trigger without one (`event:{uuid}`, or
none) can never be asked for again, so nothing is stored for it (seed 000).

The failed-message rule: a turn that will be redelivered (its whole fallback chain failed for a
passing reason) leaves its triggers `waiting`; the next turn on the conversation is shown them
(never one the bound left out), reports the ids it was shown (`shown_waiting`), and when it
completes they are recorded in the completion ledger as answered in the thread, so their
redelivery is skipped rather than answered twice.

Writes are compare-and-set: two turns of one seat on one conversation never run at once, but a
seat moving between nodes may overlap a write, and neither is lost.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import random
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from engine.coord.contract import CoordError, CoordStore, KeyExists, RevisionMismatch
from seats.providers.base import Message
from seats.providers.scripted import approx_tokens

log = logging.getLogger("seats.memory")

MEMORY_BUCKET = "crewlet_conversations"
MEMORY_AGE_SECONDS = 30 * 24 * 3600.0  # a conversation nobody touched for a month is forgotten
ASKED_CHARS = 4_000    # what an exchange keeps of the message that woke the turn
ANSWER_CHARS = 4_000   # ... of the seat's answer
TOOL_LINE_CHARS = 600  # ... of each tool call with its result
ARGUMENT_CHARS = 300   # ... of that call's arguments
WRITE_ATTEMPTS = 20    # compare-and-set retries before a write is given up (logged)
RETRY_SPREAD_SECONDS = 0.01  # a lost race waits up to this times its attempt, at random, before reading again


def identity_of(trigger: Any) -> str:
    """The trigger's conversation identity when it has a real one; "" otherwise."""
    identity = str(trigger.get("conversation_identity") or "")
    return "" if not identity or identity.startswith("event:") else identity


@dataclass
class Exchange:
    """One earlier turn on the conversation."""

    turn_id: str
    at: str
    asked: str
    did: list[str] = field(default_factory=list)
    answer: str = ""

    def tokens(self) -> int:
        return approx_tokens(self.asked + "".join(self.did) + self.answer)


@dataclass
class Waiting:
    """A message of the conversation whose turn failed, waiting for its redelivery."""

    id: str
    at: str
    sender: str
    text: str

    def tokens(self) -> int:
        return approx_tokens(self.sender + self.text)


@dataclass
class Recollection:
    """What a turn is shown of its conversation."""

    identity: str = ""
    exchanges: list[Exchange] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)
    read: tuple[dict[str, list], int | None] | None = None  # the whole record as read, and its revision

    def messages(self) -> list[Message]:
        """The earlier exchanges as conversation turns, oldest first."""
        out: list[Message] = []
        for exchange in self.exchanges:
            out.append({"role": "user", "content": f"[earlier in this conversation, {exchange.at}]\n{exchange.asked}"})
            did = "\n".join(exchange.did)
            out.append({"role": "assistant", "content": "\n\n".join(p for p in (did, exchange.answer) if p) or "(no reply)"})
        return out

    def waiting_block(self) -> str:
        """The waiting messages as a block of the user prompt; "" when none."""
        if not self.waiting:
            return ""
        lines = ["Earlier messages in this conversation are still waiting for your answer; answer them too:"]
        lines += [f"- {w.sender or 'someone'} ({w.at}): {w.text}" for w in self.waiting]
        return "\n".join(lines)


class ConversationMemory:
    """Conversation records in the coordination store, by seat and conversation identity."""

    def __init__(self, store: CoordStore, *, age: float = MEMORY_AGE_SECONDS) -> None:
        self.store = store
        self.age = age
        self._provisioned = False

    async def provision(self) -> None:
        await self.store.ensure_bucket(MEMORY_BUCKET, max_age=self.age)
        self._provisioned = True

    async def recall(self, handle: str, identity: str, budget: int, *, exclude: set[str] = frozenset()) -> Recollection:
        """What the seat did on `identity`, newest exchanges kept first, within `budget` tokens;
        waiting messages (other than `exclude`, the turn's own triggers) are kept before any
        exchange, since they are what the turn still owes."""
        if not identity or budget <= 0:
            return Recollection(identity=identity)
        record, revision = await self._read(handle, identity)
        room = budget
        waiting = []
        for item in reversed(record["waiting"]):
            if item.id in exclude:
                continue
            if item.tokens() > room:
                break  # a bound drops it, so the turn is never told it saw it
            waiting.insert(0, item)
            room -= item.tokens()
        exchanges = []
        for exchange in reversed(record["exchanges"]):
            if exchange.tokens() > room:
                break
            exchanges.insert(0, exchange)
            room -= exchange.tokens()
        return Recollection(identity=identity, exchanges=exchanges, waiting=waiting, read=(record, revision))

    async def remember(self, handle: str, identity: str, exchange: Exchange | None, budget: int, *,
                       answered: set[str] = frozenset(), waiting: list[Waiting] = (),
                       read: tuple[dict[str, list], int | None] | None = None) -> None:
        """Add `exchange`, drop the `answered` waiting ids, add `waiting`; keep the record within
        `budget` tokens (oldest exchanges first). `read`: the record and revision the turn's
        recall read, written over without reading again (a write since fails the compare-and-set
        and the record is read then)."""
        if not identity or budget <= 0:
            return
        for attempt in range(WRITE_ATTEMPTS):
            if attempt:
                await asyncio.sleep(random.random() * RETRY_SPREAD_SECONDS * attempt)  # out of lockstep
            record, revision = read if read is not None and not attempt else await self._read(handle, identity)
            held = [w for w in record["waiting"] if w.id not in answered]
            held += [w for w in waiting if w.id not in {h.id for h in held}]
            exchanges = record["exchanges"] + ([exchange] if exchange is not None else [])
            value = _encode(identity, _bounded(exchanges, held, budget))
            try:
                if revision is None:
                    await self.store.create(MEMORY_BUCKET, _key(handle, identity), value)
                else:
                    await self.store.update(MEMORY_BUCKET, _key(handle, identity), value, revision)
                return
            except (KeyExists, RevisionMismatch):
                continue  # somebody wrote between the read and the write: read again
        log.warning("conversation_memory_write_lost", extra={"seat": handle, "conversation_key": identity})

    async def _read(self, handle: str, identity: str) -> tuple[dict[str, list], int | None]:
        if not self._provisioned:
            await self.provision()
        entry = await self.store.get(MEMORY_BUCKET, _key(handle, identity))
        if entry is None:
            return {"exchanges": [], "waiting": []}, None
        try:
            raw = json.loads(entry.value)
            return {"exchanges": [Exchange(**e) for e in raw.get("exchanges", [])],
                    "waiting": [Waiting(**w) for w in raw.get("waiting", [])]}, entry.revision
        except (ValueError, TypeError) as exc:  # a record this build cannot read starts again
            log.warning("conversation_memory_unreadable", extra={"seat": handle, "error": str(exc)})
            return {"exchanges": [], "waiting": []}, entry.revision


class TurnMemory:
    """One turn's side of its conversation's memory: what it is shown, and what it leaves. A
    store that does not answer costs the turn its memory (logged), never the turn."""

    def __init__(self, memory: ConversationMemory | None, handle: str, trigger: Any, budget: int, *,
                 constituents: list[Any]) -> None:
        self.memory = memory
        self.handle = handle
        self.identity = identity_of(trigger)
        self.budget = budget
        self.constituents = constituents
        self.own = {str(e.id) for e in constituents}
        self._read: tuple[dict[str, list], int | None] | None = None

    async def recall(self) -> Recollection:
        if self.memory is None or not self.identity:
            return Recollection(identity=self.identity)
        try:
            recollection = await self.memory.recall(self.handle, self.identity, self.budget, exclude=self.own)
        except CoordError as exc:
            log.warning("conversation_memory_unread", extra={"seat": self.handle, "error": str(exc)})
            return Recollection(identity=self.identity)
        self._read = recollection.read  # the turn's record is written over this, unless it moved
        return recollection

    async def record(self, *, turn_id: str, outcome: str, redelivered: bool, asked: str, answer: str,
                     tool_calls: list[dict[str, Any]], answered: list[str]) -> None:
        """What the turn did, for the conversation's next turn; or, when its trigger comes back
        (`redelivered`), the trigger as waiting. A turn that will run again for another reason
        (a budget, a lost lease) leaves nothing: it has not happened yet."""
        if self.memory is None or not self.identity or outcome in ("budget_exhausted", "interrupted"):
            return
        try:
            if redelivered:
                await self.memory.remember(self.handle, self.identity, None, self.budget,
                                           waiting=[_waiting(e) for e in self.constituents], read=self._read)
                return
            exchange = Exchange(turn_id=turn_id, at=now_iso(), asked=clip(asked, ASKED_CHARS),
                                did=[_did(call) for call in tool_calls], answer=clip(answer, ANSWER_CHARS))
            await self.memory.remember(self.handle, self.identity, exchange, self.budget,
                                       answered=self.own | set(answered), read=self._read)
        except CoordError as exc:
            log.warning("conversation_memory_unwritten", extra={"seat": self.handle, "error": str(exc)})


def _waiting(event: Any) -> Waiting:
    text = event.get("salient_body") or event.get("body") or event.get("task") or event.summary()
    return Waiting(id=str(event.id), at=event.to_wire()["timestamp"], sender=str(event.get("sender") or ""),
                   text=clip(str(text), ASKED_CHARS))


def _did(call: dict[str, Any]) -> str:
    """One tool call as an earlier exchange remembers it."""
    arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False, default=str)
    outcome = f"error: {call['error']}" if call.get("error") else call.get("result") or ""
    return clip(f"I called {call['name']} {clip(arguments, ARGUMENT_CHARS)} -> {outcome}", TOOL_LINE_CHARS)


def _bounded(exchanges: list[Exchange], waiting: list[Waiting], budget: int) -> dict[str, list]:
    """Waiting first (what is owed), then the newest exchanges, within `budget` tokens."""
    room = budget - sum(w.tokens() for w in waiting)
    kept: list[Exchange] = []
    for exchange in reversed(exchanges):
        if exchange.tokens() > room:
            break
        kept.insert(0, exchange)
        room -= exchange.tokens()
    return {"exchanges": kept, "waiting": waiting}


def _encode(identity: str, record: dict[str, list]) -> bytes:
    return json.dumps({"identity": identity, "exchanges": [asdict(e) for e in record["exchanges"]],
                       "waiting": [asdict(w) for w in record["waiting"]]}, ensure_ascii=False).encode()


def _key(handle: str, identity: str) -> str:
    # An identity is free text of any length; the key is a digest of it (the record names it).
    return f"{handle}.{hashlib.sha256(identity.encode()).hexdigest()[:32]}"


def clip(text: str, limit: int) -> str:
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()
