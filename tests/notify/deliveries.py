"""Vendor deliveries as the vendors send them: bodies shaped like their documented payloads and
headers signed the way each signs, so the tests exercise the real checks."""
from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
import uuid

SECRETS = {
    "github": "gh-secret-0123456789",
    "slack": "slack-signing-secret-0123456789",
    "gitlab": "gitlab-token-0123456789",
    "jira": "jira-secret-0123456789",
    "mattermost": "mattermost-token-0123456789",
}

ENV = {
    "GITHUB_WEBHOOK_SECRET": SECRETS["github"],
    "SLACK_SIGNING_SECRET": SECRETS["slack"],
    "GITLAB_WEBHOOK_TOKEN": SECRETS["gitlab"],
    "JIRA_WEBHOOK_SECRET": SECRETS["jira"],
    "MATTERMOST_WEBHOOK_TOKEN": SECRETS["mattermost"],
}

INTEGRATIONS = """
integrations:
  github:
    webhook_secret: "${GITHUB_WEBHOOK_SECRET}"
    users: {octo-alice: alice, octo-bob: bob, octo-maya: maya}
  slack:
    signing_secret: "${SLACK_SIGNING_SECRET}"
    users: {U0ALICE: alice, U0BOB: bob, U0MAYA: maya}
  gitlab:
    token: "${GITLAB_WEBHOOK_TOKEN}"
    users: {alice-gl: alice, maya-gl: maya}
  jira:
    webhook_secret: "${JIRA_WEBHOOK_SECRET}"
    users: {"alice@nimbus.example": alice, "acc-bob": bob}
  mattermost:
    token: "${MATTERMOST_WEBHOOK_TOKEN}"
    users: {alice-mm: alice, bob-mm: bob}
"""

SEATS = """
org:
  seats:
    - {handle: maya, kind: human, role: founder}
    - {handle: alice, kind: agent, role: engineer, reports_to: maya}
    - {handle: bob, kind: agent, role: engineer, reports_to: maya}
    - {handle: carol, kind: agent, role: pm, reports_to: maya}
"""

_ids = itertools.count(1)


def company_yaml(*, provider: str = "{name: local, kind: scripted, delay_seconds: 0.1, reply: ok}", extra: str = "",
                 integrations: str = INTEGRATIONS) -> str:
    return f"name: nimbus\nproviders:\n  llm:\n    - {provider}\n{SEATS}{integrations}{extra}"


def dumps(payload) -> bytes:
    return json.dumps(payload).encode()


# -- signatures --------------------------------------------------------------------------------
def github_headers(body: bytes, event: str = "issue_comment", delivery: str | None = None, secret: str | None = None) -> dict:
    mac = hmac.new((secret or SECRETS["github"]).encode(), body, hashlib.sha256).hexdigest()
    return {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": f"sha256={mac}", "Content-Type": "application/json"}


def slack_headers(body: bytes, stamp: int | None = None, secret: str | None = None) -> dict:
    stamp = int(time.time()) if stamp is None else stamp
    base = b"v0:" + str(stamp).encode() + b":" + body
    mac = hmac.new((secret or SECRETS["slack"]).encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(stamp), "X-Slack-Signature": f"v0={mac}", "Content-Type": "application/json"}


def gitlab_headers(event: str = "Note Hook", token: str | None = None, delivery: str | None = None) -> dict:
    return {"X-Gitlab-Event": event, "X-Gitlab-Token": token or SECRETS["gitlab"],
            "X-Gitlab-Event-UUID": delivery or str(uuid.uuid4()), "Content-Type": "application/json"}


def jira_headers(body: bytes, secret: str | None = None, delivery: str | None = None) -> dict:
    mac = hmac.new((secret or SECRETS["jira"]).encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature": f"sha256={mac}", "X-Atlassian-Webhook-Identifier": delivery or str(uuid.uuid4()),
            "Content-Type": "application/json"}


def mattermost_headers() -> dict:
    return {"Content-Type": "application/json"}


# -- bodies ------------------------------------------------------------------------------------
def github_comment(text: str, *, author: str = "octo-maya", repo: str = "nimbus/api", number: int = 12,
                   pr: bool = True, pr_author: str = "octo-alice", comment_id: int | None = None) -> dict:
    issue = {"number": number, "title": "Retry the flaky upload", "user": {"login": pr_author},
             "html_url": f"https://github.com/{repo}/pull/{number}", "assignees": []}
    if pr:
        issue["pull_request"] = {"url": f"https://api.github.com/repos/{repo}/pulls/{number}"}
    return {"action": "created", "issue": issue, "repository": {"full_name": repo}, "sender": {"login": author},
            "comment": {"id": comment_id or next(_ids), "body": text, "user": {"login": author},
                        "html_url": f"https://github.com/{repo}/pull/{number}#issuecomment-1"}}


def github_pull_request(action: str, *, actor: str = "octo-maya", repo: str = "nimbus/api", number: int = 12,
                        author: str = "octo-alice", body: str = "", merged: bool = False, **more) -> dict:
    pr = {"number": number, "title": "Retry the flaky upload", "user": {"login": author}, "body": body,
          "html_url": f"https://github.com/{repo}/pull/{number}", "assignees": [], "requested_reviewers": [], "merged": merged}
    return {"action": action, "pull_request": pr, "repository": {"full_name": repo}, "sender": {"login": actor}, **more}


def slack_message(text: str, *, channel: str = "C9", user: str = "U0MAYA", ts: str | None = None,
                  thread_ts: str | None = None, channel_type: str | None = "channel", app_user: str = "U0ALICE",
                  event_id: str | None = None, **event_fields) -> dict:
    event = {"type": "message", "channel": channel, "user": user, "text": text,
             "ts": ts or f"1718.{next(_ids):06d}", **event_fields}
    if channel_type is not None:
        event["channel_type"] = channel_type
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return {"type": "event_callback", "team_id": "T1", "api_app_id": "A1", "event": event,
            "event_id": event_id or f"Ev{uuid.uuid4().hex[:12]}", "event_time": int(time.time()),
            "authorizations": [{"user_id": app_user, "is_bot": True}]}


def gitlab_note(text: str, *, project: str = "nimbus/web", iid: int = 4, merge_request: bool = True,
                author: str = "maya-gl", note_id: int | None = None) -> dict:
    kind = "merge_request" if merge_request else "issue"
    return {"object_kind": "note", "user": {"username": author}, "project": {"path_with_namespace": project},
            "object_attributes": {"id": note_id or next(_ids), "note": text, "noteable_type": "MergeRequest" if merge_request else "Issue",
                                  "url": f"https://gitlab.example/{project}/-/{kind}s/{iid}#note_1"},
            kind: {"iid": iid, "title": "Speed up the build"}}


def jira_event(kind: str = "comment_created", *, key: str = "POC-7", text: str = "Please look",
               author: dict | None = None, assignee: dict | None = None, comment_id: str | None = None, **more) -> dict:
    fields = {"summary": "Upload fails", "description": "Long description", "assignee": assignee,
              "status": {"name": "In Progress"}}
    body = {"webhookEvent": kind, "issue": {"key": key, "self": "https://nimbus.atlassian.net/rest/api/2/issue/1",
                                            "fields": fields},
            "user": author or {"accountId": "acc-maya", "displayName": "Maya"}, **more}
    if kind.startswith("comment"):
        body["comment"] = {"id": comment_id or str(next(_ids)), "body": text, "author": author or {"accountId": "acc-maya", "displayName": "Maya"}}
    return body


def mattermost_post(text: str, *, channel: str = "ch1", user_name: str = "maya-mm", user_id: str = "u" * 26,
                    post_id: str | None = None, root_id: str = "", channel_name: str = "town-square",
                    token: str | None = None, **more) -> dict:
    return {"token": token or SECRETS["mattermost"], "team_id": "t1", "team_domain": "nimbus", "channel_id": channel,
            "channel_name": channel_name, "timestamp": int(time.time() * 1000), "user_id": user_id,
            "user_name": user_name, "post_id": post_id or f"p{next(_ids)}", "root_id": root_id, "text": text,
            "trigger_word": "", "file_ids": "", **more}
