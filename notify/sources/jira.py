"""Jira webhooks: `X-Hub-Signature` is `sha256=<HMAC>` over the body under the webhook secret,
`X-Atlassian-Webhook-Identifier` the delivery id (a body hash when absent); every event keys on
its issue, `jira:POC-7` (seed 000, "Inbox Batching & Coalescing": "Jira keys on the issue";
"Jira issue_updated bodies ... collapse to their event lead").

Who a delivery reaches: the people a comment mentions (`[~accountid:...]`, `[~name]`), an
assignee the event just named, and (implicitly) the issue's assignee, through
`integrations.jira.users`, keyed by account id, email address or user name.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from notify.sources.base import (
    Address,
    BaseSource,
    Notification,
    ParseError,
    body_digest,
    check_prefixed_hmac,
    dig,
    header,
    render,
)

MENTION = re.compile(r"\[~(?:accountid:)?([^\]\s]+)\]")
KEY = re.compile(r"^[A-Z][A-Z0-9_]*-[0-9]+$")


def person(user: Any) -> tuple[str, tuple[str, ...]]:
    """(the display name, every identifier a users map may key this person by)."""
    if not isinstance(user, Mapping):
        return "", ()
    ids = tuple(str(user[k]) for k in ("accountId", "emailAddress", "name", "key") if user.get(k))
    name = str(user.get("displayName") or (ids[0] if ids else ""))
    return name, tuple(dict.fromkeys(ids + ((name,) if name else ())))


def address(user: Any, why: str, explicit: bool) -> list[Address]:
    _, ids = person(user)
    return [Address(ids[0], why, explicit, aka=ids[1:])] if ids else []


class Jira(BaseSource):
    name = "jira"
    secret_field = "webhook_secret"
    signature_header = "X-Hub-Signature"
    kept_headers = ("X-Atlassian-Webhook-Identifier", "X-Atlassian-Webhook-Retry", "User-Agent", "Content-Type")

    def verify(self, secret: bytes, headers: Mapping[str, str], body: bytes, now: float) -> None:
        check_prefixed_hmac(secret, body, header(headers, self.signature_header), self.signature_header)

    def delivery_id(self, headers: Mapping[str, str], payload: Any, body: bytes) -> str:
        return header(headers, "X-Atlassian-Webhook-Identifier") or body_digest(body)

    def event_kind(self, headers: Mapping[str, str], payload: Any) -> str:
        return str(payload.get("webhookEvent") or "unknown") if isinstance(payload, Mapping) else "unknown"

    def parse(self, event_kind: str, payload: Any) -> Notification | None:
        issue = payload.get("issue")
        if not isinstance(issue, Mapping):
            if event_kind.startswith(("jira:issue", "comment_")):
                raise ParseError("issue: missing")
            return None  # a project, version or sprint event: addressed to nobody
        key = str(issue.get("key") or "")
        if not KEY.match(key):
            raise ParseError(f"issue.key: expected a key such as POC-7, got {key!r}")
        if event_kind == "jira:issue_deleted":
            return None
        fields = issue.get("fields") if isinstance(issue.get("fields"), Mapping) else {}
        summary = str(fields.get("summary") or "")
        comment = payload.get("comment") if isinstance(payload.get("comment"), Mapping) else None
        if comment is not None and event_kind in ("comment_updated", "comment_deleted"):
            return None  # an edit is not a new message
        actor_name, actor_ids = person((comment or {}).get("author") or payload.get("user"))
        addresses: list[Address] = []
        if comment is not None:
            text = str(comment.get("body") or "")
            lead = f"{actor_name or 'someone'} commented on {key}"
            addresses += [Address(m, "mention") for m in dict.fromkeys(MENTION.findall(text))]
        else:
            text, lead = self._change(event_kind, key, actor_name, fields, payload)
            addresses += self._newly_assigned(payload, fields)
        if summary:
            lead += f" ({summary})"
        addresses += address(fields.get("assignee"), "assignee", explicit=False)
        url = self._url(issue, key)
        lifecycle = comment is None
        return Notification(
            source=self.name, event_kind=event_kind, subject=key, sender=actor_ids[0] if actor_ids else "",
            sender_aka=actor_ids[1:], body=render(lead, text, url), salient_body=text or lead, lead=lead,
            partition_key=f"jira:{key}", conversation_identity=f"jira:{key}",
            message_id=f"jira:comment:{comment['id']}" if comment and comment.get("id") else "",
            addresses=tuple(addresses), url=url, lifecycle=lifecycle,
            metadata={"issue": key, "summary": summary, "issue_event_type": str(payload.get("issue_event_type_name") or ""),
                      "status": str(dig(fields, "status", "name") or "")},
        )

    def _change(self, event_kind: str, key: str, actor: str, fields: Mapping, payload: Any) -> tuple[str, str]:
        """(the body, the lead) of an event that is not a comment."""
        if event_kind == "jira:issue_created":
            return str(fields.get("description") or ""), f"{actor or 'someone'} created {key}"
        items = dig(payload, "changelog", "items") or []
        changes = [f"{i.get('field')}: {i.get('fromString') or '-'} -> {i.get('toString') or '-'}"
                   for i in items if isinstance(i, Mapping) and i.get("field")]
        what = f" ({'; '.join(changes)})" if changes else ""
        body = "\n".join(changes)
        description = str(fields.get("description") or "")
        if description:
            body = f"{body}\n\nDescription:\n{description}" if body else f"Description:\n{description}"
        return body, f"{actor or 'someone'} updated {key}{what}"

    def _newly_assigned(self, payload: Any, fields: Mapping) -> list[Address]:
        items = dig(payload, "changelog", "items") or []
        assigned = any(isinstance(i, Mapping) and i.get("field") == "assignee" and i.get("to") for i in items)
        if assigned or payload.get("issue_event_type_name") == "issue_assigned":
            return address(fields.get("assignee"), "assignee", explicit=True)
        return []

    def _url(self, issue: Mapping, key: str) -> str:
        self_link = str(issue.get("self") or "")
        if "/rest/" in self_link:
            return f"{self_link.split('/rest/')[0]}/browse/{key}"
        return ""

    def digest_body(self, message: Mapping[str, Any]) -> str:
        """An issue_updated body (a stale full description) collapses to its lead; comments keep text."""
        meta = message.get("metadata") or {}
        if meta.get("event_kind") == "jira:issue_updated" and meta.get("lifecycle"):
            return str(meta.get("lead") or "")
        return super().digest_body(message)
