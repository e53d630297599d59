"""The digest trigger (seed 000, "Inbox Batching & Coalescing", "The digest trigger"): one
notification per partition -- the earlier messages as a chronological digest, the latest in
full -- with the supersede rules, the same-sender dedupe, every constituent kept, conservative
flag merges, the deepest delegation and the FIRST constituent's trace."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from events.envelope import new
from events.tracing import TraceContext, new_span_id, new_trace_id
from events.types.notification import ExternalNotification
from events.types.wakes import A2ARequest
from notify.coalesce import CoalesceError, coalesce, coalesced_event
from notify.sources.base import render

T0 = datetime(2025, 1, 6, 9, 0, 0, tzinfo=timezone.utc)


def wake(text: str, *, sender: str = "octo-maya", at: int = 0, source: str = "github", kind: str = "issue_comment",
         key: str = "github:nimbus/api#12", identity: str | None = None, lifecycle: bool = False, lead: str | None = None,
         recon: bool = False, direct: bool = True, depth: int = 0, chain: tuple = (), seat: str = "alice"):
    lead = lead or f"{sender} commented on {key}"
    data = ExternalNotification(
        agent_handle=seat, agent_id=f"id-{seat}", agent_role="engineer", event_kind=kind, subject=key.split(":", 1)[1],
        sender=sender, conversation_identity=identity or key, salient_body=text, recon=recon, direct=direct,
        body=render(lead, text, "https://example.test/thread"),
        metadata={"lead": lead, "lifecycle": lifecycle, "event_kind": kind},
    )
    trace = TraceContext(new_trace_id(), new_span_id(), new_span_id())
    return new(data, trace, source=source, payload={"partition_key": key}, timestamp=T0 + timedelta(seconds=at),
               delegation_depth=depth, delegation_chain=chain, parent_turn_id=f"turn-{depth}" if depth else "")


def test_a_partition_merges_into_one_digest_ending_with_the_latest_body_in_full():
    events = [wake(f"comment {i}", at=i, sender=f"user{i % 3}") for i in range(10)]
    merged = coalesce(list(reversed(events)))  # the order the drain handed them over does not matter
    assert merged.type == "external_notification"
    body = merged.data.body
    assert body.count("## Get Full Context") == 1  # the scaffolding renders once, for the latest
    positions = [body.index(f"comment {i}") for i in range(10)]
    assert positions == sorted(positions)  # chronological
    assert body.endswith(events[-1].data.body)
    assert merged.data.salient_body == "comment 9"
    assert [m["salient_body"] for m in merged.data.messages] == [f"comment {i}" for i in range(10)]
    assert all({"sender", "salient_body", "metadata", "recon"} <= set(m) for m in merged.data.messages)
    assert merged.get("partition_key") == "github:nimbus/api#12"
    assert merged.payload["digest"] == {"constituents": 10, "deduplicated": 0, "superseded": 0}


def test_the_merged_trigger_carries_the_first_constituents_trace():
    events = [wake(f"m{i}", at=i) for i in range(3)]
    merged = coalesce(events)
    first = events[0]
    assert (merged.trace_id, merged.span_id, merged.parent_span_id) == (first.trace_id, first.span_id, first.parent_span_id)


def test_jira_issue_updated_bodies_collapse_to_their_lead_and_comments_keep_their_text():
    key = "jira:POC-7"
    updated = wake("status: To Do -> In Progress\n\nDescription:\nA very long stale description", source="jira",
                   kind="jira:issue_updated", key=key, lifecycle=True, lead="Maya updated POC-7 (status)")
    comment = wake("Can you take this?", source="jira", kind="comment_created", key=key, at=1, lead="Maya commented on POC-7")
    latest = wake("Any update?", source="jira", kind="comment_created", key=key, at=2)
    merged = coalesce([updated, comment, latest])
    assert "Maya updated POC-7 (status)" in merged.data.body
    assert "stale description" not in merged.data.body
    assert "Can you take this?" in merged.data.body
    assert merged.payload["digest"]["superseded"] == 1


def test_a_code_hosts_lifecycle_events_collapse_to_their_lead():
    opened = wake("A long pull request description", kind="pull_request", lifecycle=True, lead="octo-maya opened nimbus/api#12")
    synced = wake("octo-maya synchronize nimbus/api#12", kind="pull_request", lifecycle=True, at=1,
                  lead="octo-maya synchronize nimbus/api#12")
    latest = wake("please review", at=2)
    body = coalesce([opened, synced, latest]).data.body
    assert "octo-maya opened nimbus/api#12" in body and "A long pull request description" not in body


def test_a_byte_identical_later_message_from_the_same_sender_collapses_but_two_peoples_plus_ones_survive():
    events = [
        wake("+1", sender="octo-maya", at=0),
        wake("+1", sender="octo-bob", at=1),
        wake("CI is red again", sender="ci-bot", at=2),
        wake("CI is red again", sender="ci-bot", at=3),
        wake("the fix is in #13", sender="octo-maya", at=4),
    ]
    merged = coalesce(events)
    body = merged.data.body
    assert body.count("+1") == 2  # maya's and bob's: two facts
    assert body.count("CI is red again") == 1
    assert "(the same as a later message from ci-bot)" in body
    assert merged.payload["digest"]["deduplicated"] == 1
    assert len(merged.data.messages) == 5  # every constituent is still kept


def test_recon_merges_conservatively_and_one_direct_ask_keeps_the_obligation():
    broadcasts = [wake(f"fyi {i}", at=i, recon=True, direct=False) for i in range(3)]
    merged = coalesce(broadcasts)
    assert merged.data.recon and not merged.data.direct
    mixed = coalesce(broadcasts + [wake("@alice can you answer?", at=5, recon=False, direct=True)])
    assert not mixed.data.recon and mixed.data.direct


def test_the_deepest_constituents_delegation_bookkeeping_survives_the_merge():
    events = [wake("a", at=0, depth=1, chain=("carol",)), wake("b", at=1, depth=3, chain=("carol", "bob", "alice")),
              wake("c", at=2, depth=0)]
    merged = coalesce(events)
    assert merged.delegation_depth == 3
    assert merged.delegation_chain == ("carol", "bob", "alice") and merged.parent_turn_id == "turn-3"


def test_same_id_duplicates_are_dropped_and_a_single_event_is_its_own_trigger():
    one = wake("only")
    assert coalesce([one, one]) is one
    two = wake("second", at=1)
    merged = coalesce([one, two, one])
    assert len(merged.data.messages) == 2
    assert coalesce([two, one]).id == merged.id  # the same partition merges into the same trigger


@pytest.mark.parametrize("bad, why", [
    (lambda: new(A2ARequest(agent_handle="alice", body="x"), TraceContext(new_trace_id(), new_span_id())), "not a notification"),
    (lambda: wake("x", seat="bob", at=9), "agent_handle"),
    (lambda: wake("x", identity="github:nimbus/api#99", at=9), "conversation_identity"),
])
def test_a_partition_that_cannot_be_merged_raises_coalesce_error(bad, why):
    with pytest.raises(CoalesceError, match=why):
        coalesce([wake("ok"), bad()])
    with pytest.raises(CoalesceError):
        coalesce([])


def test_the_coalesced_record_names_the_partition_never_the_conversation():
    events = [wake("a", sender="octo-maya"), wake("b", sender="octo-bob", at=1), wake("c", sender="octo-maya", at=2)]
    merged = coalesce(events)
    record = coalesced_event(merged, events, turn_id="turn-9")
    assert record.type == "notifications_coalesced"
    assert record.data.partition_key == "github:nimbus/api#12"
    assert "conversation_key" not in record.fields
    assert record.data.constituents == 3 and record.data.event_ids == [str(e.id) for e in events]
    assert record.data.senders == ["octo-maya", "octo-bob"] and record.data.agent_handle == "alice"
    assert record.data.turn_id == "turn-9"
    assert record.trace_id == events[0].trace_id
