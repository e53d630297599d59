"""Every subject the engine uses, and the stream each belongs to (seed 000, "Topic Structure").

This module is the ONLY place a subject string is built: a producer and a consumer that
disagree about a name do not raise, they just stop talking to each other. A test fails when
any other module of the project spells a `crewlet.` subject literal.

The wildcard grammar is NATS's: `*` matches one token, `>` one or more trailing tokens.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

ROOT = "crewlet"
DLQ_ROOT = "dlq"

_TOKEN = re.compile(r"^[A-Za-z0-9_\-]+$")
_HANDLE = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]")

EVENT_RETENTION_HOURS_DEFAULT = 720
CONFIG_RETENTION_SECONDS = 3600


class TopicError(ValueError):
    def __init__(self, message: str) -> None:
        super().__init__(f"queue: {message}")


def check_handle(handle: str) -> str:
    """Return handle when it can stand as one subject token; TopicError naming it otherwise."""
    if not isinstance(handle, str) or not _HANDLE.match(handle):
        raise TopicError(f"seat handle {handle!r} cannot be a subject token (lowercase letters, digits, '_' and '-')")
    return handle


# -- per-seat ---------------------------------------------------------------------------
def agent_inbox(handle: str) -> str:
    """`crewlet.agent.{handle}.inbox`: all work for a seat arrives here."""
    return f"{ROOT}.agent.{check_handle(handle)}.inbox"


def agent_control(handle: str) -> str:
    """`crewlet.agent.{handle}.control`: consumed apart from the inbox, so an inbox hold never blocks it."""
    return f"{ROOT}.agent.{check_handle(handle)}.control"


def agent_reflect(handle: str) -> str:
    return f"{ROOT}.agent.{check_handle(handle)}.reflect"


def agent_pattern(kind: str = "inbox") -> str:
    """Every seat's mailbox of one kind: `crewlet.agent.*.inbox`."""
    return f"{ROOT}.agent.*.{kind}"


def handle_of(subject: str) -> str | None:
    """The seat handle of a per-seat subject, else None."""
    parts = subject.split(".")
    if len(parts) == 4 and parts[0] == ROOT and parts[1] == "agent":
        return parts[2]
    return None


def inbox_group(handle: str) -> str:
    """The one consumer group of a seat's inbox: membership IS ownership."""
    return f"seat-{check_handle(handle)}"


def control_group(handle: str) -> str:
    return f"seat-{check_handle(handle)}-control"


# -- fleet-wide work queues -------------------------------------------------------------
NOTIFICATIONS_INBOUND = f"{ROOT}.notifications.inbound"
NOTIFICATIONS_GROUP = "notify"


# -- the record -------------------------------------------------------------------------
def event_subject(event_type: str) -> str:
    """`crewlet.events.{type}`; a dotted type (`turn.guard_breach`) keeps its dots."""
    if not event_type or any(not _TOKEN.match(t) for t in event_type.split(".")):
        raise TopicError(f"event type {event_type!r} cannot be a subject suffix")
    return f"{ROOT}.events.{event_type}"


EVENTS_ALL = f"{ROOT}.events.>"


def event_type_of(subject: str) -> str | None:
    prefix = f"{ROOT}.events."
    return subject[len(prefix):] if subject.startswith(prefix) else None


# -- custody (seed 002, "Custody: the rows of a node without data") ----------------------
CUSTODY_RECORDS = f"{ROOT}.custody.records"  # a node without data publishes its events here, in batches
CUSTODY_GROUP = "event-custody"              # the data nodes take them from this one group


# -- ephemeral request/reply (seed 000, "Reading the fleet's history") -------------------
# Namespaces that carry questions and answers only: no stream, no consumer, nothing stored
# ("a read of the event log that wrote an event would grow the log every time somebody
# looked at it"). A publish through the queue there is refused rather than given a stream,
# since JetStream would answer a request on a stream's subject with its own publish ack.
EPHEMERAL_NAMESPACES = ("eventfan",)


def eventfan_subject(node_id: str) -> str:
    """`crewlet.eventfan.{node}`: where one node answers the fleet's history questions. A node id
    that cannot stand as one token (it may hold '.') is rewritten and suffixed with its digest,
    so two ids never share a subject."""
    if not isinstance(node_id, str) or not node_id:
        raise TopicError(f"node id {node_id!r} cannot name a subject")
    token = node_id if _TOKEN.match(node_id) else f"{_UNSAFE.sub('_', node_id)}_{hashlib.sha256(node_id.encode()).hexdigest()[:8]}"
    return f"{ROOT}.eventfan.{token}"


def is_ephemeral(subject: str) -> bool:
    """True for a subject in a request/reply namespace."""
    tokens = subject.split(".")
    return len(tokens) > 2 and tokens[0] == ROOT and tokens[1] in EPHEMERAL_NAMESPACES


def check_ephemeral(subject: str) -> str:
    """A concrete subject in a request/reply namespace; TopicError naming it otherwise."""
    validate_subject(subject)
    if not is_ephemeral(subject):
        raise TopicError(f"{subject!r} is not a request/reply subject (one of "
                         f"{', '.join(f'{ROOT}.{ns}.*' for ns in EPHEMERAL_NAMESPACES)})")
    return subject


# -- control plane ----------------------------------------------------------------------
CONFIG_REVISION_ACTIVATED = f"{ROOT}.config.revision_activated"
CONFIG_REVISION_APPLIED = f"{ROOT}.config.revision_applied"


# -- memory -----------------------------------------------------------------------------
def memory_subject(handle: str, table: str, key: str) -> str:
    """One subject per row, on a stream that keeps one message per subject."""
    if not _TOKEN.match(table):
        raise TopicError(f"memory table {table!r} cannot be a subject token")
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return f"{ROOT}.memory.{check_handle(handle)}.{table}.{digest}"


# -- dead letters -----------------------------------------------------------------------
def pair_digest(topic: str, group: str) -> str:
    """The identity of a (topic, group) pair: a join alone aliases distinct pairs."""
    return hashlib.sha256(f"{topic}\x00{group}".encode()).hexdigest()[:16]


def dlq_subject(topic: str, group: str) -> str:
    """`dlq.{topic}.{group}.{digest}`: outside crewlet.* so the live stream never resurfaces poison."""
    head = ".".join(_UNSAFE.sub("_", t) or "_" for t in topic.split("."))
    return f"{DLQ_ROOT}.{head}.{_UNSAFE.sub('_', group) or '_'}.{pair_digest(topic, group)}"


def durable_name(topic: str, group: str) -> str:
    """A JetStream durable name for (topic, group): a lossy rewrite plus the pair's digest."""
    readable = _UNSAFE.sub("_", f"{group}__{topic.replace('.', '_')}")[:80]
    return f"{readable}__{pair_digest(topic, group)}"


# -- streams ----------------------------------------------------------------------------
@dataclass(frozen=True)
class StreamSpec:
    name: str
    subjects: tuple[str, ...]
    retention: str                   # "interest" | "limits"
    max_age_seconds: float = 0       # 0: no age bound
    max_msgs_per_subject: int = 0    # 0: unbounded
    work_queue: bool = True          # carries mailboxes (durable consumer groups)


def engine_streams(event_retention_hours: float = EVENT_RETENTION_HOURS_DEFAULT) -> list[StreamSpec]:
    """The streams of seed 000's table, retention by purpose."""
    age = event_retention_hours * 3600
    return [
        StreamSpec("CREWLET_AGENT", (f"{ROOT}.agent.>",), "interest"),
        StreamSpec("CREWLET_NOTIFICATIONS", (f"{ROOT}.notifications.>",), "interest"),
        StreamSpec("CREWLET_EVENTS", (EVENTS_ALL,), "limits", max_age_seconds=age, work_queue=False),
        StreamSpec("CREWLET_CONFIG", (f"{ROOT}.config.>",), "limits", max_age_seconds=CONFIG_RETENTION_SECONDS, work_queue=False),
        StreamSpec("CREWLET_MEMORY", (f"{ROOT}.memory.>",), "limits", max_msgs_per_subject=1, work_queue=False),
        # Custody batches wait here until a data node has decided their keeper (seed 002).
        StreamSpec("CREWLET_CUSTODY", (f"{ROOT}.custody.>",), "interest"),
        StreamSpec("CREWLET_DLQ", (f"{DLQ_ROOT}.>",), "limits", max_age_seconds=age, work_queue=False),
    ]


def namespace_of(subject: str) -> str:
    """The namespace a subject belongs to: `crewlet.<second>` inside the engine's space, else its first token."""
    tokens = subject.split(".")
    if tokens[0] == ROOT and len(tokens) > 1:
        return f"{ROOT}.{tokens[1]}"
    return tokens[0]


def stream_for(subject: str, event_retention_hours: float = EVENT_RETENTION_HOURS_DEFAULT) -> StreamSpec:
    """The stream that carries `subject`; a namespace the engine does not define gets one of its own,
    with the mailbox semantic (interest retention) as its default (seed 000, "Topic Structure")."""
    for spec in engine_streams(event_retention_hours):
        if any(subject_matches(pattern, subject) for pattern in spec.subjects):
            return spec
    if is_ephemeral(subject):
        raise TopicError(f"{subject!r} is a request/reply subject: no stream carries it")
    namespace = namespace_of(subject)
    name = "CREWLET_NS_" + _UNSAFE.sub("_", namespace.replace(".", "_")).upper()
    return StreamSpec(name, (f"{namespace}.>",), "interest")


def spans_every_namespace(pattern: str) -> bool:
    """True for a pattern whose first token is a wildcard (`>`, `*.>`, `*.x`): it names no stream."""
    return pattern.split(".")[0] in ("*", ">")


def stream_for_pattern(pattern: str, event_retention_hours: float = EVENT_RETENTION_HOURS_DEFAULT) -> StreamSpec:
    """The one stream a subscription pattern resolves to; TopicError for a pattern that spans
    every namespace or more than one stream (it would be resolved to a guess)."""
    validate_pattern(pattern)
    if spans_every_namespace(pattern):
        raise TopicError(f"pattern {pattern!r} spans every namespace; name one (e.g. {EVENTS_ALL})")
    tokens = pattern.split(".")
    if tokens[0] == ROOT and (len(tokens) < 3 or tokens[1] in ("*", ">")):
        raise TopicError(f"pattern {pattern!r} spans several streams; name one namespace under {ROOT}")
    probe = ".".join("x" if t in ("*", ">") else t for t in tokens)
    return stream_for(probe, event_retention_hours)


# -- where the subjects live on a broker -----------------------------------------------
@dataclass(frozen=True)
class Namespace:
    """Where the engine's subjects and streams sit on a broker. A node's namespace is the root:
    every subject and stream name as above. A conformance run on an operator's own deployment
    (`crewlet_conformance`) sets `prefix`, so its streams and subjects cannot meet a fleet's:
    `crewlet.agent.ada.inbox` travels as `{prefix}.crewlet.agent.ada.inbox` on the stream
    `{PREFIX}_CREWLET_AGENT`. Callers keep using the names above; only the JetStream backend
    translates, at the wire."""

    prefix: str = ""

    def __post_init__(self) -> None:
        if self.prefix and not _TOKEN.match(self.prefix):
            raise TopicError(f"namespace prefix {self.prefix!r} must be one subject token (letters, digits, '_', '-')")

    def subject(self, subject: str) -> str:
        """The subject (or pattern) as it travels on the broker."""
        return f"{self.prefix}.{subject}" if self.prefix else subject

    def logical(self, wire: str) -> str:
        """The subject a caller named, from the one on the broker."""
        head = f"{self.prefix}."
        return wire[len(head):] if self.prefix and wire.startswith(head) else wire

    def stream(self, name: str) -> str:
        """A stream's (or a stream-name prefix's) name on the broker."""
        return f"{_UNSAFE.sub('_', self.prefix).upper()}_{name}" if self.prefix else name

    def spec(self, spec: StreamSpec) -> StreamSpec:
        """`spec` as it is laid out on the broker: its name and subjects in this namespace."""
        if not self.prefix:
            return spec
        return StreamSpec(self.stream(spec.name), tuple(self.subject(s) for s in spec.subjects), spec.retention,
                          spec.max_age_seconds, spec.max_msgs_per_subject, spec.work_queue)


ROOT_NAMESPACE = Namespace()


# -- grammar ----------------------------------------------------------------------------
def validate_subject(subject: str) -> str:
    """A concrete subject: dot-separated, non-empty tokens, no wildcards."""
    if not subject or any(not _TOKEN.match(t) for t in subject.split(".")):
        raise TopicError(f"{subject!r} is not a valid subject")
    return subject


def validate_pattern(pattern: str) -> str:
    tokens = pattern.split(".") if pattern else []
    if not tokens:
        raise TopicError("an empty pattern matches nothing")
    for i, token in enumerate(tokens):
        if token == ">" and i != len(tokens) - 1:
            raise TopicError(f"{pattern!r}: '>' may only be the last token")
        if token not in ("*", ">") and not _TOKEN.match(token):
            raise TopicError(f"{pattern!r} is not a valid subject pattern")
    return pattern


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS matching: `*` one token, `>` one or more trailing tokens."""
    p_tokens = pattern.split(".")
    s_tokens = subject.split(".")
    for i, p in enumerate(p_tokens):
        if p == ">":
            return len(s_tokens) > i
        if i >= len(s_tokens):
            return False
        if p != "*" and p != s_tokens[i]:
            return False
    return len(p_tokens) == len(s_tokens)
