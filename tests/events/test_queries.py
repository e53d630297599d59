"""Reads of the event store: every filter, the cursor, one event, one trace."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection

from events.envelope import format_timestamp
from events.queries import EventQueryError, encode_cursor, events_page, get_event, trace
from events.store import write_events
from events.tracing import new_trace_id
from tests.events.factories import make_event

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]

T0 = datetime(2025, 6, 1, 9, 0, 0, tzinfo=timezone.utc)


def walk(limit: int, **filters) -> list[dict]:
    """Every item of every page, following next_cursor to the end."""
    items: list[dict] = []
    cursor = None
    for _ in range(10_000):
        page = events_page(cursor=cursor, limit=limit, **filters)
        assert len(page["items"]) <= limit
        items.extend(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError("the cursor never reached the end")


def ids(items: list[dict]) -> list[str]:
    return [i["id"] for i in items]


@pytest.fixture
def company():
    """A small, known history: three agents, several categories, one trace, one accounting row."""
    trace_id = new_trace_id()
    events = {
        "assigned": make_event("task_assigned", at=T0, agent_id="id-ada", agent_handle="ada", task="write the spec", trace_id=trace_id),
        "notified": make_event(
            "external_notification", at=T0 + timedelta(seconds=1), agent_id="id-bob", agent_handle="bob",
            event_kind="issue_comment", trace_id=trace_id,
        ),
        "turn": make_event("agent_turn_completed", at=T0 + timedelta(seconds=2), agent_id="id-ada", trace_id=trace_id),
        "spend": make_event("auxiliary_spend", at=T0 + timedelta(seconds=3), agent_id="id-ada", trace_id=trace_id),
        "ask": make_event(
            "task_assigned", at=T0 + timedelta(seconds=4), agent_id="id-cyd", participants=["id-bob"], task="help ada",
        ),
        "late": make_event("agent_turn_completed", at=T0 + timedelta(hours=1), agent_id="id-cyd"),
    }
    write_events(events.values())
    return {"trace_id": trace_id, **{k: str(v.id) for k, v in events.items()}}


def test_a_page_is_newest_first_and_each_item_is_the_wire_form_with_category_and_summary(company):
    page = events_page()
    assert ids(page["items"]) == [company[k] for k in ("late", "ask", "spend", "turn", "notified", "assigned")]
    assert page["next_cursor"] is None
    first = page["items"][-1]
    assert first["type"] == "task_assigned" and first["task"] == "write the spec" and first["agent_handle"] == "ada"
    assert first["category"] == "task"
    assert first["summary"] and isinstance(first["summary"], str)
    assert first["timestamp"] == format_timestamp(T0)


def test_filter_by_category(company):
    assert ids(events_page(category="task")["items"]) == [company["ask"], company["assigned"]]
    assert ids(events_page(category="system")["items"]) == [company["late"], company["spend"], company["turn"]]
    assert events_page(category="a2a")["items"] == []


def test_filter_by_one_type_or_several(company):
    assert ids(events_page(types=["external_notification"])["items"]) == [company["notified"]]
    assert ids(events_page(types="task_assigned")["items"]) == [company["ask"], company["assigned"]]
    both = events_page(types=["task_assigned", "external_notification"], limit=2)
    assert ids(both["items"]) == [company["ask"], company["notified"]]
    assert ids(events_page(types=["task_assigned", "external_notification"], cursor=both["next_cursor"])["items"]) == [company["assigned"]]


def test_filter_by_agent_id_matches_every_agent_the_event_involves(company):
    assert ids(events_page(agent="id-bob")["items"]) == [company["ask"], company["notified"]]
    assert ids(events_page(agent="id-ada")["items"]) == [company["spend"], company["turn"], company["assigned"]]


def test_filter_by_agent_handle_matches_the_handle_the_event_carries(company):
    assert ids(events_page(agent="ada")["items"]) == [company["assigned"]]


def test_a_resolver_turns_a_handle_into_the_agents_id(company):
    org = {"ada": ["id-ada"], "cyd": ["id-cyd"]}
    resolve = lambda name: org.get(name, [])  # noqa: E731
    every = [company[k] for k in ("spend", "turn", "assigned")]
    assert ids(events_page(agent="ada", resolve_agent=resolve)["items"]) == every
    # Two names for one agent, each row once, still newest first and still paged exactly.
    first = events_page(agent="ada", limit=2, resolve_agent=resolve)
    assert ids(first["items"]) == every[:2]
    assert ids(events_page(agent="ada", limit=2, cursor=first["next_cursor"], resolve_agent=resolve)["items"]) == every[2:]


def test_filter_by_trace_id(company):
    assert ids(events_page(trace_id=company["trace_id"])["items"]) == [company[k] for k in ("spend", "turn", "notified", "assigned")]


def test_filter_by_time_window_since_inclusive_until_exclusive(company):
    page = events_page(since=T0 + timedelta(seconds=1), until="2025-06-01T09:00:04Z")
    assert ids(page["items"]) == [company[k] for k in ("spend", "turn", "notified")]
    assert ids(events_page(since="2025-06-01T10:00:00+01:00", until="2025-06-01T09:00:01Z")["items"]) == [company["assigned"]]


def test_feed_only_leaves_out_the_stored_not_fed_class(company):
    assert company["spend"] in ids(events_page()["items"])
    fed = ids(events_page(feed_only=True)["items"])
    assert company["spend"] not in fed and len(fed) == 5
    # ...and it is still in a trace and under its category.
    assert company["spend"] in ids(trace(company["trace_id"]))
    assert company["spend"] in ids(events_page(category="system")["items"])


def test_filters_combine(company):
    assert ids(events_page(agent="id-ada", category="system", feed_only=True)["items"]) == [company["turn"]]
    assert ids(events_page(agent="id-bob", types=["task_assigned"], since=T0 + timedelta(seconds=2))["items"]) == [company["ask"]]
    assert ids(events_page(category="task", trace_id=company["trace_id"])["items"]) == [company["assigned"]]


def test_a_trace_is_oldest_first(company):
    assert ids(trace(company["trace_id"])) == [company[k] for k in ("assigned", "notified", "turn", "spend")]
    assert trace(new_trace_id()) == []


def test_one_event_by_id(company):
    item = get_event(company["notified"])
    assert item["id"] == company["notified"] and item["category"] == "notification"
    assert item["event_kind"] == "issue_comment"
    assert get_event(uuid.uuid4()) is None


def test_the_cursor_visits_every_row_exactly_once_when_many_share_a_microsecond():
    instant = datetime(2025, 6, 2, 12, 0, 0, 500_000, tzinfo=timezone.utc)
    events = [make_event("task_assigned", at=instant, agent_id="id-ada") for _ in range(700)]
    events += [make_event("agent_turn_completed", at=instant + timedelta(microseconds=d % 7 - 3), agent_id="id-ada") for d in range(300)]
    events += [make_event("external_notification", at=instant - timedelta(seconds=d), agent_id="id-bob") for d in range(1, 201)]
    write_events(events)
    expected = sorted(events, key=lambda e: (e.timestamp, e.id.hex), reverse=True)

    for limit in (1, 37, 500):
        seen = ids(walk(limit))
        assert seen == [str(e.id) for e in expected], limit
    # The same under a filter, on the index that filter seeks.
    by_type = ids(walk(41, types=["task_assigned"]))
    assert sorted(by_type) == sorted(str(e.id) for e in events[:700]) and len(set(by_type)) == 700
    by_agent = ids(walk(53, agent="id-ada"))
    assert by_agent == [str(e.id) for e in expected if e.get("agent_id") == "id-ada"]
    by_two_types = ids(walk(29, types=["task_assigned", "external_notification"]))
    assert by_two_types == [str(e.id) for e in expected if e.type != "agent_turn_completed"]


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": encode_cursor(T0, uuid.uuid4())[:-3]}, "cursor"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2025-06-01T09:00:00"}, "until"),  # no offset: not RFC 3339
        ({"since": "2025-06-01"}, "since"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"category": "gossip"}, "category"),
    ],
)
def test_a_parameter_the_store_cannot_answer_is_named(kwargs, param):
    with pytest.raises(EventQueryError) as refused:
        events_page(**kwargs)
    assert refused.value.param == param
    assert refused.value.detail.startswith(f"{param}: ")


def test_a_malformed_event_id_is_named():
    with pytest.raises(EventQueryError) as refused:
        get_event("nope")
    assert refused.value.param == "id"


@pytest.mark.parametrize(
    ("kwargs", "index"),
    [
        ({}, "sqlite_autoindex_crewlet_events_1"),  # the (event_time, event_id) unique constraint
        ({"category": "task"}, "crewlet_events_category"),
        ({"types": ["task_assigned"]}, "crewlet_events_type"),
        ({"trace_id": "abc"}, "crewlet_events_trace"),
        ({"agent": "id-ada"}, "sqlite_autoindex_crewlet_event_parties_1"),  # (agent_id, event_time, event_id)
    ],
)
def test_every_filter_is_an_ordered_index_seek(kwargs, index, monkeypatch):
    """No filter sorts the log: each walks an index in page order and stops at the page's end."""
    captured: list[tuple[str, list]] = []
    import events.queries as queries

    real_fetch = queries._fetch
    monkeypatch.setattr(queries, "_fetch", lambda sql, params, using: captured.append((sql, params)) or real_fetch(sql, params, using))
    events_page(cursor=encode_cursor(T0, uuid.uuid4()), **kwargs)
    sql, params = captured[0]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        plan = " | ".join(str(row[-1]) for row in cursor.fetchall())
    assert f"INDEX {index} " in plan, plan
    if "agent" not in kwargs:
        assert "TEMP B-TREE" not in plan, plan


# -- the trace box (events.queries.find_trace) -----------------------------------------------
def test_the_trace_box_takes_a_trace_id_an_event_id_or_a_task_id():
    from events.queries import find_trace

    task_id = str(uuid.uuid4())
    trace_id = new_trace_id()
    task = make_event("task_assigned", at=T0, agent_id="id-ada", agent_handle="ada", task="write it", task_id=task_id,
                      trace_id=trace_id)
    turn = make_event("agent_turn_completed", at=T0 + timedelta(seconds=1), agent_id="id-ada", trace_id=trace_id)
    write_events([task, turn, make_event("org_started", at=T0)])

    assert find_trace(trace_id) == find_trace(f"  {trace_id.upper()} ") != find_trace(str(turn.id))
    assert find_trace(trace_id).trace_id == trace_id and find_trace(trace_id).via == "trace"
    assert (find_trace(str(turn.id)).trace_id, find_trace(str(turn.id)).via) == (trace_id, "event")
    assert (find_trace(turn.id.hex).trace_id, find_trace(turn.id.hex).via) == (trace_id, "event")
    assert (find_trace(task_id).trace_id, find_trace(task_id).via) == (trace_id, "task")
    assert find_trace(str(uuid.uuid4())).trace_id is None  # well formed, names nothing


def test_a_short_trace_id_is_a_prefix_and_an_ambiguous_one_lists_its_traces():
    from events.queries import find_trace

    shared = "abcdef12"
    one, two = shared + "0" * 24, shared + "f" * 24
    lone = "0123456789abcdef" * 2
    write_events([make_event("org_started", at=T0 + timedelta(seconds=i), trace_id=t) for i, t in enumerate((one, one, two, lone))])

    assert (find_trace(lone[:8]).trace_id, find_trace(lone[:8]).via) == (lone, "prefix")
    ambiguous = find_trace(shared)
    assert ambiguous.trace_id is None and ambiguous.candidates == (one, two)  # each trace once, in order
    assert find_trace(shared + "0").trace_id == one
    assert find_trace("fedcba98").trace_id is None and find_trace("fedcba98").candidates == ()


@pytest.mark.parametrize("text", ["", "   ", "abc", "not-an-id", "abcdef12' OR 1=1 --", "%", "ab_cd%ef", "g" * 8,
                                  "a" * 33, "1234-5678"])
def test_the_trace_box_refuses_what_can_be_no_id_by_naming_the_field(text):
    from events.queries import find_trace

    write_events([make_event("org_started", at=T0, trace_id="ab" * 16)])
    with pytest.raises(EventQueryError) as refused:
        find_trace(text)
    assert refused.value.param == "q"


def test_a_prefix_is_a_range_seek_of_the_trace_index_not_a_scan():
    from events.queries import _trace_prefix  # noqa: F401  (the SQL it runs is what is checked)

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN SELECT trace_id FROM crewlet_events WHERE trace_id >= %s AND trace_id < %s "
                       "ORDER BY trace_id LIMIT 1", ["abcdef12", "abcdef12g"])
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
        cursor.execute("EXPLAIN QUERY PLAN SELECT event_type, event_time, trace_id FROM crewlet_events WHERE task_id IN (%s, %s) "
                       "AND NOT (task_id = '') AND trace_id != '' LIMIT %s", ["x", "y", 100])
        task_plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "USING COVERING INDEX crewlet_events_trace" in plan or "USING INDEX crewlet_events_trace" in plan, plan
    assert "crewlet_events_task" in task_plan, task_plan
