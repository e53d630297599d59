"""The stand-in digest behind `seats.merge.merge_partition` (seed 000, "The digest trigger"): the
latest constituent's body, the FIRST constituent's trace, every constituent in `messages`."""
from __future__ import annotations

from seats.merge import chronological_merge, merge_partition
from tests.seats.hosting import labels, mail


def test_a_single_event_is_its_own_trigger():
    only = mail("only", key="slack:D1")
    assert merge_partition([only]) is only


def test_a_merged_trigger_leads_with_the_first_trace_and_carries_the_latest_body_and_every_message():
    events = [mail(f"m{i}", key="slack:D1", at=i) for i in range(3)]
    merged = chronological_merge(events)
    assert merged.id not in {e.id for e in events}
    assert (merged.trace_id, merged.span_id) == (events[0].trace_id, events[0].span_id)
    assert merged.get("body") == "m2" and merged.get("partition_key") == "slack:D1"
    assert [m["body"] for m in merged.get("messages")] == labels(events)
    assert merged.get("constituent_ids") == [str(e.id) for e in events]
