"""GitLab webhooks: the `X-Gitlab-Token` header is the shared token, `X-Gitlab-Event-UUID` the
delivery id; merge requests keyed `gitlab:<project>!<iid>`, issues `gitlab:<project>#<iid>`
(seed 000, "Inbox Batching & Coalescing"; a code host's lifecycle events collapse to their lead).

Who a delivery reaches: the usernames @-mentioned in a note or description, the assignees and
reviewers an event names, through `integrations.gitlab.users` (username -> seat handle or role).
A note on a commit or a snippet has no conversation the seed keys: it keys on its own event.
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
    check_token,
    dig,
    header,
    need,
    render,
)

MENTION = re.compile(r"(?<![\w@/.`])@([A-Za-z0-9_][A-Za-z0-9_.-]*[A-Za-z0-9_])")
LIFECYCLE_KINDS = {"merge_request", "issue", "work_item"}
IGNORED_ACTIONS = {"update"}  # an edit re-sends the whole object; the change itself is not addressed


def usernames(items: Any) -> list[str]:
    return [str(i["username"]) for i in (items or []) if isinstance(i, Mapping) and i.get("username")]


class GitLab(BaseSource):
    name = "gitlab"
    secret_field = "token"
    signature_header = "X-Gitlab-Token"
    kept_headers = ("X-Gitlab-Event", "X-Gitlab-Event-UUID", "X-Gitlab-Webhook-UUID", "X-Gitlab-Instance",
                    "User-Agent", "Content-Type")

    def verify(self, secret: bytes, headers: Mapping[str, str], body: bytes, now: float) -> None:
        check_token(secret, header(headers, self.signature_header), self.signature_header)

    def delivery_id(self, headers: Mapping[str, str], payload: Any, body: bytes) -> str:
        return header(headers, "X-Gitlab-Event-UUID") or body_digest(body)

    def event_kind(self, headers: Mapping[str, str], payload: Any) -> str:
        kind = payload.get("object_kind") or payload.get("event_type") if isinstance(payload, Mapping) else None
        return str(kind or header(headers, "X-Gitlab-Event") or "unknown")

    def parse(self, event_kind: str, payload: Any) -> Notification | None:
        if event_kind == "note":
            return self._note(payload)
        if event_kind in LIFECYCLE_KINDS:
            action = str(dig(payload, "object_attributes", "action") or "")
            if action in IGNORED_ACTIONS and not self._newly_named(payload):
                return None
            return self._lifecycle(event_kind, action, payload)
        return None  # push, pipeline, ...: addressed to nobody

    def _project(self, payload: Any) -> str:
        return str(need(payload, "project", "path_with_namespace"))

    def _note(self, payload: Any) -> Notification:
        project = self._project(payload)
        attrs = payload.get("object_attributes")
        if not isinstance(attrs, Mapping):
            raise ParseError("object_attributes: missing")
        noteable = str(attrs.get("noteable_type") or "")
        text = str(attrs.get("note") or "")
        author = str(dig(payload, "user", "username") or "")
        if noteable == "MergeRequest":
            item, words, key = need(payload, "merge_request"), "merge request", f"{project}!{self._iid(payload, 'merge_request')}"
        elif noteable == "Issue":
            item, words, key = need(payload, "issue"), "issue", f"{project}#{self._iid(payload, 'issue')}"
        else:
            item, words, key = {}, noteable.lower() or "object", ""
        subject = key or f"{project} {words}"
        title = str(item.get("title") or "") if isinstance(item, Mapping) else ""
        lead = f"{author or 'someone'} commented on {words} {subject}" + (f" ({title})" if title else "")
        url = str(attrs.get("url") or "")
        addresses = [Address(u, "mention") for u in mentions(text)] + self._implicit(payload)
        partition = f"gitlab:{key}" if key else ""
        return Notification(
            source=self.name, event_kind="note", subject=subject, sender=author, body=render(lead, text, url),
            salient_body=text, lead=lead, partition_key=partition, conversation_identity=partition,
            message_id=f"gitlab:note:{attrs['id']}" if attrs.get("id") else "", addresses=tuple(addresses), url=url,
            metadata={"project": project, "noteable_type": noteable, "title": title},
        )

    def _lifecycle(self, event_kind: str, action: str, payload: Any) -> Notification:
        project = self._project(payload)
        attrs = payload.get("object_attributes")
        if not isinstance(attrs, Mapping):
            raise ParseError("object_attributes: missing")
        iid = need(attrs, "iid")
        mr = event_kind == "merge_request"
        key = f"{project}{'!' if mr else '#'}{iid}"
        words = "merge request" if mr else "issue"
        actor = str(dig(payload, "user", "username") or "")
        title = str(attrs.get("title") or "")
        verb = {"open": "opened", "close": "closed", "reopen": "reopened", "merge": "merged", "approved": "approved",
                "unapproved": "unapproved", "update": "updated"}.get(action, action or "changed")
        lead = f"{actor or 'someone'} {verb} {words} {key}" + (f" ({title})" if title else "")
        text = str(attrs.get("description") or "") if action == "open" else ""
        addresses = [Address(u, "mention") for u in mentions(text)] + self._newly_named(payload) + self._implicit(payload)
        url = str(attrs.get("url") or "")
        return Notification(
            source=self.name, event_kind=event_kind, subject=key, sender=actor, body=render(lead, text, url),
            salient_body=text or lead, lead=lead, partition_key=f"gitlab:{key}", conversation_identity=f"gitlab:{key}",
            message_id="", addresses=tuple(addresses), url=url, lifecycle=True,
            metadata={"project": project, "action": action, "iid": iid, "title": title},
        )

    def _iid(self, payload: Any, kind: str) -> Any:
        iid = need(payload, kind, "iid")
        if not isinstance(iid, int) or isinstance(iid, bool):
            raise ParseError(f"{kind}.iid: expected an integer, got {iid!r}")
        return iid

    def _newly_named(self, payload: Any) -> list[Address]:
        """Assignees and reviewers an update just added: explicit, somebody is waiting on them."""
        changes = payload.get("changes") if isinstance(payload, Mapping) else None
        out: list[Address] = []
        for field, why in (("assignees", "assignee"), ("reviewers", "reviewer")):
            change = dig(changes, field)
            if isinstance(change, Mapping):
                before = set(usernames(change.get("previous")))
                out += [Address(u, why) for u in usernames(change.get("current")) if u not in before]
        return out

    def _implicit(self, payload: Any) -> list[Address]:
        out = [Address(u, "assignee", explicit=False) for u in usernames(payload.get("assignees"))]
        out += [Address(u, "reviewer", explicit=False) for u in usernames(payload.get("reviewers"))]
        return out

    def digest_body(self, message: Mapping[str, Any]) -> str:
        """A lifecycle event collapses to its lead; a note keeps its text."""
        meta = message.get("metadata") or {}
        if meta.get("lifecycle"):
            return str(meta.get("lead") or message.get("salient_body") or "")
        return super().digest_body(message)


def mentions(text: str) -> list[str]:
    return list(dict.fromkeys(MENTION.findall(text or "")))
