"""GitHub webhooks: `X-Hub-Signature-256` over the body, `X-GitHub-Delivery` as the delivery id,
issues and pull requests keyed `github:<owner>/<repo>#<number>` (seed 000, "Inbox Batching &
Coalescing": "GitHub on repo#number"; "a code host's lifecycle events collapse to their lead").

Who a delivery reaches: the logins @-mentioned in its text, a reviewer or an assignee the event
names, and (implicitly) the issue's author, assignees and requested reviewers, each through
`integrations.github.users` (login -> seat handle or role).
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
    need,
    render,
)

MENTION = re.compile(r"(?<![\w@/.`])@([A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))\b")
COMMENT_KINDS = {"issue_comment", "pull_request_review_comment", "pull_request_review"}
LIFECYCLE_KINDS = {"issues", "pull_request"}
IGNORED_ACTIONS = {"edited", "deleted", "labeled", "unlabeled", "locked", "unlocked", "pinned", "unpinned",
                   "milestoned", "demilestoned", "transferred", "dismissed"}


def mentions(text: str) -> list[str]:
    """The logins @-mentioned in `text`, in order, once each."""
    return list(dict.fromkeys(MENTION.findall(text or "")))


def logins(items: Any) -> list[str]:
    return [str(i["login"]) for i in (items or []) if isinstance(i, Mapping) and i.get("login")]


class GitHub(BaseSource):
    name = "github"
    secret_field = "webhook_secret"
    signature_header = "X-Hub-Signature-256"
    kept_headers = ("X-GitHub-Event", "X-GitHub-Delivery", "X-GitHub-Hook-ID", "User-Agent", "Content-Type")

    def verify(self, secret: bytes, headers: Mapping[str, str], body: bytes, now: float) -> None:
        check_prefixed_hmac(secret, body, header(headers, self.signature_header), self.signature_header)

    def delivery_id(self, headers: Mapping[str, str], payload: Any, body: bytes) -> str:
        return header(headers, "X-GitHub-Delivery") or body_digest(body)

    def event_kind(self, headers: Mapping[str, str], payload: Any) -> str:
        return header(headers, "X-GitHub-Event") or "unknown"

    def parse(self, event_kind: str, payload: Any) -> Notification | None:
        action = str(payload.get("action") or "")
        if event_kind in COMMENT_KINDS:
            if action in IGNORED_ACTIONS:
                return None
            return self._comment(event_kind, action, payload)
        if event_kind in LIFECYCLE_KINDS:
            if action in IGNORED_ACTIONS:
                return None
            return self._lifecycle(event_kind, action, payload)
        return None  # ping, push, star, ...: addressed to nobody

    # -- the two shapes --------------------------------------------------------------------
    def _thread(self, event_kind: str, payload: Any) -> tuple[Mapping, str, str]:
        """(the issue or pull request, its kind in words, its key `owner/repo#n`)."""
        repo = need(payload, "repository", "full_name")
        item = payload.get("pull_request") if event_kind.startswith("pull_request") else payload.get("issue")
        if not isinstance(item, Mapping):
            raise ParseError(f"{'pull_request' if event_kind.startswith('pull_request') else 'issue'}: missing")
        number = need(item, "number")
        if not isinstance(number, int) or isinstance(number, bool):
            raise ParseError(f"number: expected an integer, got {number!r}")
        words = "pull request" if event_kind.startswith("pull_request") or item.get("pull_request") else "issue"
        return item, words, f"{repo}#{number}"

    def _implicit(self, item: Mapping) -> list[Address]:
        out = [Address(login, "author", explicit=False) for login in logins([item.get("user")])]
        out += [Address(login, "assignee", explicit=False) for login in logins(item.get("assignees"))]
        out += [Address(login, "reviewer", explicit=False) for login in logins(item.get("requested_reviewers"))]
        return out

    def _comment(self, event_kind: str, action: str, payload: Any) -> Notification:
        item, words, key = self._thread(event_kind, payload)
        part = payload.get("review") if event_kind == "pull_request_review" else payload.get("comment")
        if not isinstance(part, Mapping):
            raise ParseError(f"{'review' if event_kind == 'pull_request_review' else 'comment'}: missing")
        author = dig(part, "user", "login") or dig(payload, "sender", "login") or ""
        text = str(part.get("body") or "")
        verb = f"reviewed ({part.get('state', '').lower() or 'commented'})" if event_kind == "pull_request_review" else "commented on"
        title = str(item.get("title") or "")
        lead = f"{author or 'someone'} {verb} {words} {key}" + (f" ({title})" if title else "")
        url = str(part.get("html_url") or item.get("html_url") or "")
        addresses = [Address(login, "mention") for login in mentions(text)] + self._implicit(item)
        comment_id = part.get("id")
        return Notification(
            source=self.name, event_kind=event_kind, subject=key, sender=str(author), body=render(lead, text, url),
            salient_body=text, lead=lead, partition_key=f"github:{key}", conversation_identity=f"github:{key}",
            message_id=f"github:{event_kind}:{comment_id}" if comment_id else "", addresses=tuple(addresses), url=url,
            metadata={"action": action, "repo": key.split("#")[0], "number": item.get("number"), "title": title},
        )

    def _lifecycle(self, event_kind: str, action: str, payload: Any) -> Notification:
        item, words, key = self._thread(event_kind, payload)
        actor = dig(payload, "sender", "login") or ""
        title = str(item.get("title") or "")
        merged = action == "closed" and bool(item.get("merged"))
        lead = f"{actor or 'someone'} {'merged' if merged else action.replace('_', ' ')} {words} {key}" + (f" ({title})" if title else "")
        addresses: list[Address] = []
        if action == "review_requested":
            addresses += [Address(login, "reviewer") for login in logins([payload.get("requested_reviewer")])]
        if action == "assigned":
            addresses += [Address(login, "assignee") for login in logins([payload.get("assignee")])]
        text = str(item.get("body") or "") if action == "opened" else ""
        if text:
            addresses += [Address(login, "mention") for login in mentions(text)]
        addresses += self._implicit(item)
        url = str(item.get("html_url") or "")
        return Notification(
            source=self.name, event_kind=event_kind, subject=key, sender=str(actor), body=render(lead, text, url),
            salient_body=text or lead, lead=lead, partition_key=f"github:{key}", conversation_identity=f"github:{key}",
            message_id="", addresses=tuple(addresses), url=url, lifecycle=True,
            metadata={"action": action, "repo": key.split("#")[0], "number": item.get("number"), "title": title},
        )

    def digest_body(self, message: Mapping[str, Any]) -> str:
        """A lifecycle event collapses to its lead; a comment keeps its text."""
        meta = message.get("metadata") or {}
        if meta.get("lifecycle"):
            return str(meta.get("lead") or message.get("salient_body") or "")
        return super().digest_body(message)
