"""Topics: the only place a subject is spelled (seed 000, "Topic Structure")."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine.queue import topics

ROOT = Path(__file__).resolve().parent.parent
PROJECT_DIRS = ["crewlet_site", "engine", "events", "seats", "notify", "a2a", "dashboard", "benchmarks"]


def _string_literals(tree: ast.AST):
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node


def test_no_module_but_topics_spells_a_crewlet_subject():
    offenders = []
    for folder in PROJECT_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            if path == ROOT / "engine" / "queue" / "topics.py":
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in _string_literals(tree):
                if "crewlet." in node.value and not node.value.startswith("crewlet.yaml"):
                    text = node.value
                    # A logger or module name is not a subject; a subject has a crewlet.<namespace>. head.
                    spaces = ("agent", "notifications", "events", "config", "memory", "custody")
                    if any(text.startswith(f"crewlet.{ns}") for ns in spaces) or ".crewlet." in text:
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text!r}")
    assert not offenders, "subjects must be built by engine/queue/topics.py:\n" + "\n".join(offenders)


def test_every_per_seat_subject_names_the_seat_and_its_kind():
    assert topics.agent_inbox("alice") == "crewlet.agent.alice.inbox"
    assert topics.agent_control("alice") == "crewlet.agent.alice.control"
    assert topics.agent_reflect("alice") == "crewlet.agent.alice.reflect"
    assert topics.handle_of(topics.agent_inbox("bob")) == "bob"


@pytest.mark.parametrize("handle", ["", "Alice", "a.b", "a b", "a*", "a>", "-x"])
def test_a_handle_that_cannot_be_a_subject_token_is_refused_by_name(handle):
    with pytest.raises(topics.TopicError) as err:
        topics.agent_inbox(handle)
    assert repr(handle) in str(err.value)


def test_each_subject_lands_on_the_stream_its_retention_needs():
    by = lambda s: topics.stream_for(s)  # noqa: E731
    assert (by(topics.agent_inbox("a")).name, by(topics.agent_inbox("a")).retention) == ("CREWLET_AGENT", "interest")
    assert by(topics.NOTIFICATIONS_INBOUND).retention == "interest"
    events = by(topics.event_subject("agent_turn_completed"))
    assert (events.name, events.retention, events.max_age_seconds) == ("CREWLET_EVENTS", "limits", 720 * 3600)
    assert by(topics.CONFIG_REVISION_ACTIVATED).max_age_seconds == 3600
    assert by(topics.memory_subject("a", "diary", "k")).max_msgs_per_subject == 1
    assert by(topics.dlq_subject(topics.agent_inbox("a"), "g")).name == "CREWLET_DLQ"


def test_a_namespace_the_engine_does_not_define_gets_a_mailbox_stream_of_its_own():
    spec = topics.stream_for("acme.orders.created")
    assert spec.subjects == ("acme.>",) and spec.retention == "interest"
    assert spec.name not in {s.name for s in topics.engine_streams()}


def test_dead_letter_subject_is_outside_crewlet_and_keyed_by_the_pair_digest():
    a = topics.dlq_subject("crewlet.agent.a.inbox", "g.h")
    b = topics.dlq_subject("crewlet.agent.a.inbox.g", "h")
    assert a.startswith("dlq.") and not topics.subject_matches(topics.EVENTS_ALL, a)
    assert a != b  # a join alone would alias these pairs; the digest keeps them apart


def test_dotted_event_types_keep_their_dots():
    assert topics.event_subject("turn.guard_breach") == "crewlet.events.turn.guard_breach"
    assert topics.event_type_of("crewlet.events.turn.guard_breach") == "turn.guard_breach"


@pytest.mark.parametrize(
    "pattern,subject,expected",
    [
        ("crewlet.agent.*.inbox", "crewlet.agent.alice.inbox", True),
        ("crewlet.agent.*.inbox", "crewlet.agent.alice.control", False),
        ("crewlet.events.>", "crewlet.events.turn.guard_breach", True),
        ("crewlet.events.>", "crewlet.events", False),
        ("crewlet.*", "crewlet.agent.alice.inbox", False),
        ("a.b", "a.b", True),
    ],
)
def test_wildcards_follow_nats_grammar(pattern, subject, expected):
    assert topics.subject_matches(pattern, subject) is expected


@pytest.mark.parametrize("pattern", [">", "*.>", "*.events.>", "crewlet.>", "crewlet.*.x"])
def test_a_pattern_spanning_every_namespace_or_several_streams_is_refused(pattern):
    with pytest.raises(topics.TopicError):
        topics.stream_for_pattern(pattern)


def test_durable_names_are_distinct_per_pair_and_legal():
    a = topics.durable_name("crewlet.agent.a.inbox", "seat-a")
    b = topics.durable_name("crewlet.agent.a.control", "seat-a")
    assert a != b
    assert not set(a) & set(". *>\t")
