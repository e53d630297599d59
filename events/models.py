"""The event store's tables (seed 002, "The event store" and "The load-bearing tables").

`crewlet_events` holds one row per categorised event this node published, keyed by
(event_time, event_id): a second write of the same event is ignored. `payload` is the
event's full wire form; the columns beside it are promoted out of it so every filter the
REST routes and the dashboard offer is an index seek.

`crewlet_event_parties` says which agents each event involves, one row per pair. It is an
index of `crewlet_events` rather than state of its own: a per-agent filter spread across
five columns (agent_id, agent_ids, participants, to_agent_id, from_agent_id) would scan the
log instead of seeking.

Times are stored the way Django's SQLite backend stores every DateTimeField (UTC text to
the microsecond), so the ORM, the admin and the writer's raw SQL all compare alike.
"""
from __future__ import annotations

from django.db import models


class StoredEvent(models.Model):
    """One event as the store keeps it; `payload` is what `to_wire()` produced."""

    event_id = models.UUIDField()
    event_time = models.DateTimeField()
    event_type = models.CharField(max_length=200)  # the row label (events.categories.row_label)
    source = models.CharField(max_length=200, blank=True, default="")
    category = models.CharField(max_length=32)
    agent_id = models.CharField(max_length=200, blank=True, default="")
    agent_role = models.CharField(max_length=200, blank=True, default="")
    task_id = models.CharField(max_length=200, blank=True, default="")
    channel_id = models.CharField(max_length=200, blank=True, default="")
    sender = models.CharField(max_length=200, blank=True, default="")
    trace_id = models.CharField(max_length=64, blank=True, default="")
    span_id = models.CharField(max_length=32, blank=True, default="")
    parent_span_id = models.CharField(max_length=32, blank=True, default="")
    node = models.CharField(max_length=200, blank=True, default="")
    conversation_key = models.CharField(max_length=500, blank=True, default="")
    partition_key = models.CharField(max_length=500, blank=True, default="")
    summary = models.TextField(blank=True, default="")
    payload = models.JSONField()
    feed = models.BooleanField(default=True)  # False for the stored-not-fed class

    class Meta:
        db_table = "crewlet_events"
        verbose_name = "event"
        verbose_name_plural = "events"
        ordering = ("-event_time", "-event_id")
        constraints = [
            # The row's identity, and the order every page walks (newest first); it also
            # serves a plain time window, so there is no separate time index.
            models.UniqueConstraint(fields=("event_time", "event_id"), name="crewlet_events_time_id"),
        ]
        indexes = [
            models.Index(fields=("category", "event_time", "event_id"), name="crewlet_events_category"),
            models.Index(fields=("event_type", "event_time", "event_id"), name="crewlet_events_type"),
            models.Index(fields=("trace_id", "event_time", "event_id"), name="crewlet_events_trace"),
            # GET /events/{id} and the admin's search by id.
            models.Index(fields=("event_id",), name="crewlet_events_id"),
            # The dashboard's trace box given a task id (events.queries.find_trace); partial,
            # because most rows carry none.
            models.Index(fields=("task_id",), name="crewlet_events_task", condition=~models.Q(task_id="")),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id}"


class EventParty(models.Model):
    """One (event, agent) pair: the agent the per-agent filter seeks on."""

    event_time = models.DateTimeField()
    event_id = models.UUIDField()
    agent_id = models.CharField(max_length=200)

    class Meta:
        db_table = "crewlet_event_parties"
        verbose_name = "event party"
        verbose_name_plural = "event parties"
        constraints = [
            # Leading with the agent makes this both the idempotency key of a re-write and
            # the ordered seek of "this agent's events, newest first".
            models.UniqueConstraint(fields=("agent_id", "event_time", "event_id"), name="crewlet_event_parties_agent"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id} in {self.event_id}"
