"""The `learning` category: the reflection subsystem and the skill lifecycle, grouped so a
dashboard can include or exclude all of it with one toggle (seed 000, "Event Types")."""
from __future__ import annotations

from typing import Any

from pydantic import field_validator

from events.envelope import register
from events.types.shapes import SeatEvent, TurnEvent, because, clip, count, duration, possessive


@register("turn_completed")
class TurnCompleted(TurnEvent):
    """A finished turn handed to the learning subsystem (its episode, reflection and profiles)."""

    trigger_type: str = ""
    outcome: str = ""
    failed: bool = False
    interactions: int = 0

    def summary(self, event) -> str:
        state = "failed turn" if self.failed else "turn"
        return f"{possessive(self.seat)} {state} is ready for reflection{because(self.outcome)}"


@register("episode_written")
class EpisodeWritten(TurnEvent):
    """One episode row for a completed turn: raw, or LLM-compacted (`compacted`)."""

    episode_id: str = ""
    compacted: bool = False
    gist: str = ""

    def summary(self, event) -> str:
        kind = "a compacted episode" if self.compacted else "an episode"
        return f"{self.seat} wrote {kind}{because(self.gist)}"


@register("persist_decider_completed")
class PersistDeciderCompleted(TurnEvent):
    """The post-turn decider chose what of a turn to keep in memory."""

    decision: str = ""
    reason: str = ""
    items: int = 0
    duration_ms: int = 0

    def summary(self, event) -> str:
        decided = self.decision or "decided"
        return f"{possessive(self.seat)} memory decider: {decided} ({count(self.items, 'item')}){because(self.reason)}"


@register("counterparty_profile_updated")
class CounterpartyProfileUpdated(SeatEvent):
    """A per-(observer, subject, platform) profile built from observed interactions changed."""

    counterparty: str = ""
    platform: str = ""
    changes: list[str] = []

    def summary(self, event) -> str:
        on = f" on {self.platform}" if self.platform else ""
        return f"{self.seat} updated its profile of {self.counterparty or 'a counterparty'}{on}"


@register("reflection_completed")
class ReflectionCompleted(TurnEvent):
    """A reflection pass over a finished turn: notes written, skills touched, what it cost."""

    outcome: str = ""
    notes_written: int = 0
    skills_touched: list[str] = []
    tokens_in: int = 0
    tokens_out: int = 0
    duration_ms: int = 0
    failed: bool = False
    error: str = ""

    def summary(self, event) -> str:
        if self.failed:
            return f"{possessive(self.seat)} reflection failed{because(self.error)}"
        return f"{self.seat} reflected on a turn in {duration(self.duration_ms)} ({count(self.notes_written, 'note')})"


class SkillEvent(SeatEvent):
    """One step of a synthesized skill's lifecycle."""

    skill_id: str = ""
    skill_name: str = ""
    version: int = 0
    reason: str = ""

    @property
    def skill(self) -> str:
        return f'skill "{self.skill_name}"' if self.skill_name else "a skill"

    def said(self, verb: str) -> str:
        return f"{self.seat} {verb} {self.skill}{because(self.reason)}"


@register("skill_synthesized")
class SkillSynthesized(SkillEvent):
    def summary(self, event) -> str:
        return self.said("synthesized")


@register("skill_refined")
class SkillRefined(SkillEvent):
    def summary(self, event) -> str:
        return self.said(f"refined (v{self.version})" if self.version else "refined")


@register("skill_promoted")
class SkillPromoted(SkillEvent):
    def summary(self, event) -> str:
        return self.said("promoted")


@register("skill_staled")
class SkillStaled(SkillEvent):
    def summary(self, event) -> str:
        return f"{self.skill} of {self.seat} went stale{because(self.reason)}"


@register("skill_archived")
class SkillArchived(SkillEvent):
    def summary(self, event) -> str:
        return self.said("archived")


@register("skill_revived")
class SkillRevived(SkillEvent):
    def summary(self, event) -> str:
        return self.said("revived")


@register("skill_used")
class SkillUsed(SkillEvent):
    """A seat loaded a skill; a company-published tool skill names the page it was read from
    (absent on a skill the seat synthesized for itself)."""

    turn_id: str = ""
    phase: str = ""
    source_page_id: str = ""
    source_container: str = ""

    def summary(self, event) -> str:
        page = f" from page {self.source_page_id}" if self.source_page_id else ""
        return f"{self.seat} loaded {self.skill}{page}"


@register("prefetch_summary")
class PrefetchSummary(TurnEvent):
    """What the turn-start prefetch gathered before the first phase opened."""

    memories: int = 0
    knowledge_pages: int = 0
    episodes: int = 0
    total_bytes: int = 0
    duration_ms: int = 0

    def summary(self, event) -> str:
        got = ", ".join(
            (count(self.memories, "memory", "memories"), count(self.knowledge_pages, "page"), count(self.episodes, "episode"))
        )
        return f"{self.seat} prefetched {got} in {duration(self.duration_ms)}"


KNOWLEDGE_QUERY_LIMIT = 200  # bytes: seed 000, "A search's query is clipped to 200 bytes"


@register("knowledge_read")
class KnowledgeRead(TurnEvent):
    """A seat read from the knowledge base: ONE row per act, listing the pages it reached
    (`pages[{id, container, title, rank}]`, rank on a ranked answer only), the `backend` their
    ids are addresses in, the `phase` and `via` (get_page, search, prefetch, skill_loaded,
    skill_injected). A read that reached no page, or had no seat, publishes nothing."""

    pages: list[dict[str, Any]] = []
    backend: str = ""
    phase: str = ""
    via: str = ""
    query: str = ""

    @field_validator("query", mode="before")
    @classmethod
    def _clip_query(cls, value: Any) -> Any:
        if isinstance(value, str) and len(value.encode()) > KNOWLEDGE_QUERY_LIMIT:
            return value.encode()[:KNOWLEDGE_QUERY_LIMIT].decode(errors="ignore")
        return value

    def summary(self, event) -> str:
        how = f" by {self.via}" if self.via else ""
        asked = f" for {clip(self.query, 60)!r}" if self.query else ""
        return f"{self.seat} read {count(len(self.pages), 'page')}{how}{asked}"


@register("compaction_requested")
class CompactionRequested(SeatEvent):
    """A seat's history grew past its bound and was queued for LLM compaction."""

    conversation_key: str = ""
    entries: int = 0
    total_bytes: int = 0
    reason: str = ""

    def summary(self, event) -> str:
        return f"{self.seat} queued {count(self.entries, 'entry', 'entries')} for compaction{because(self.reason)}"


@register("compaction_completed")
class CompactionCompleted(SeatEvent):
    """A compaction pass finished (or failed)."""

    conversation_key: str = ""
    entries_before: int = 0
    entries_after: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    duration_ms: int = 0
    failed: bool = False
    error: str = ""

    def summary(self, event) -> str:
        if self.failed:
            return f"{possessive(self.seat)} compaction failed{because(self.error)}"
        return f"{self.seat} compacted {self.entries_before:,} entries into {self.entries_after:,} in {duration(self.duration_ms)}"
