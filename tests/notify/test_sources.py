"""What each webhook source reads a delivery into, in process (seed 000, "Inbox Batching &
Coalescing" and "Routing"; seed 002, "Exposing webhooks without the admin API"):

- the whole notification a seat is woken with for one delivery of each kind: who it addresses
  and why, the lead and the body the prompt carries, the keys, the message id and the
  metadata the digest and the dashboard read;
- what reads as addressed to nobody, what is chat noise (and why), what is refused naming the
  field;
- each signature check: a missing or wrong signature refused naming the header (or body field)
  and what is wrong, Slack's timestamp checked before its signature;
- the delivery id, the event kind, Slack's challenge and how a lifecycle event or a comment
  collapses in a digest.

The process tests (tests/notify/test_edge_http.py) show the same refusals on the wire; these
run in process, so `make mutants` can run them against each mutant of notify/sources/.
"""
from __future__ import annotations

import hashlib

import pytest

from notify.sources import SOURCES, source_named
from notify.sources.base import Address as A
from notify.sources.base import Ignored, Notification, ParseError, PayloadError, SignatureError
from notify.sources.mattermost import MAX_CANDIDATES, MAX_FORM_FIELDS, token_candidates
from tests.notify import deliveries as d

FORM = {"Content-Type": "application/x-www-form-urlencoded"}

# (case, source, event kind, payload, the notification's fields besides its source and kind)
NOTIFICATIONS = [
    ("github PR comment: mentions once each in order, then the PR author", "github", "issue_comment",
     d.github_comment("@octo-alice and @octo-bob, please rerun; cc @octo-alice", comment_id=41),
     dict(
         subject="nimbus/api#12",
         sender="octo-maya",
         body=(
             "octo-maya commented on pull request nimbus/api#12 (Retry the flaky upload)\n"
             "\n"
             "@octo-alice and @octo-bob, please rerun; cc @octo-alice\n"
             "\n"
             "## Get Full Context\n"
             "https://github.com/nimbus/api/pull/12#issuecomment-1"
         ),
         salient_body="@octo-alice and @octo-bob, please rerun; cc @octo-alice",
         lead="octo-maya commented on pull request nimbus/api#12 (Retry the flaky upload)",
         partition_key="github:nimbus/api#12",
         conversation_identity="github:nimbus/api#12",
         message_id="github:issue_comment:41",
         addresses=(A("octo-alice", "mention"), A("octo-bob", "mention"), A("octo-alice", "author", explicit=False)),
         url="https://github.com/nimbus/api/pull/12#issuecomment-1",
         metadata={"action": "created", "repo": "nimbus/api", "number": 12, "title": "Retry the flaky upload"},
     )),
    ("github issue comment", "github", "issue_comment",
     d.github_comment("thanks", pr=False, number=3, comment_id=42),
     dict(
         subject="nimbus/api#3",
         sender="octo-maya",
         body=(
             "octo-maya commented on issue nimbus/api#3 (Retry the flaky upload)\n"
             "\n"
             "thanks\n"
             "\n"
             "## Get Full Context\n"
             "https://github.com/nimbus/api/pull/3#issuecomment-1"
         ),
         salient_body="thanks",
         lead="octo-maya commented on issue nimbus/api#3 (Retry the flaky upload)",
         partition_key="github:nimbus/api#3",
         conversation_identity="github:nimbus/api#3",
         message_id="github:issue_comment:42",
         addresses=(A("octo-alice", "author", explicit=False),),
         url="https://github.com/nimbus/api/pull/3#issuecomment-1",
         metadata={"action": "created", "repo": "nimbus/api", "number": 3, "title": "Retry the flaky upload"},
     )),
    ("github review: its state in the lead, the implicit author, assignee and reviewer", "github", "pull_request_review",
     {"action": "submitted", "repository": {"full_name": "nimbus/api"}, "sender": {"login": "octo-maya"},
      "pull_request": {"number": 12, "title": "Retry the flaky upload", "user": {"login": "octo-alice"},
                       "html_url": "https://github.com/nimbus/api/pull/12", "assignees": [{"login": "octo-bob"}],
                       "requested_reviewers": [{"login": "octo-carl"}]},
      "review": {"id": 7, "state": "CHANGES_REQUESTED", "body": "@octo-bob see line 3", "user": {"login": "octo-maya"},
                 "html_url": "https://github.com/nimbus/api/pull/12#pullrequestreview-7"}},
     dict(
         subject="nimbus/api#12",
         sender="octo-maya",
         body=(
             "octo-maya reviewed (changes_requested) pull request nimbus/api#12 (Retry the flaky upload)\n"
             "\n"
             "@octo-bob see line 3\n"
             "\n"
             "## Get Full Context\n"
             "https://github.com/nimbus/api/pull/12#pullrequestreview-7"
         ),
         salient_body="@octo-bob see line 3",
         lead="octo-maya reviewed (changes_requested) pull request nimbus/api#12 (Retry the flaky upload)",
         partition_key="github:nimbus/api#12",
         conversation_identity="github:nimbus/api#12",
         message_id="github:pull_request_review:7",
         addresses=(
             A("octo-bob", "mention"),
             A("octo-alice", "author", explicit=False),
             A("octo-bob", "assignee", explicit=False),
             A("octo-carl", "reviewer", explicit=False),
         ),
         url="https://github.com/nimbus/api/pull/12#pullrequestreview-7",
         metadata={"action": "submitted", "repo": "nimbus/api", "number": 12, "title": "Retry the flaky upload"},
     )),
    ("github PR opened: its description and the people it mentions", "github", "pull_request",
     d.github_pull_request("opened", body="Fixes the upload. @octo-bob please review"),
     dict(
         subject="nimbus/api#12",
         sender="octo-maya",
         body=(
             "octo-maya opened pull request nimbus/api#12 (Retry the flaky upload)\n"
             "\n"
             "Fixes the upload. @octo-bob please review\n"
             "\n"
             "## Get Full Context\n"
             "https://github.com/nimbus/api/pull/12"
         ),
         salient_body="Fixes the upload. @octo-bob please review",
         lead="octo-maya opened pull request nimbus/api#12 (Retry the flaky upload)",
         partition_key="github:nimbus/api#12",
         conversation_identity="github:nimbus/api#12",
         message_id="",
         addresses=(A("octo-bob", "mention"), A("octo-alice", "author", explicit=False)),
         url="https://github.com/nimbus/api/pull/12",
         lifecycle=True,
         metadata={"action": "opened", "repo": "nimbus/api", "number": 12, "title": "Retry the flaky upload"},
     )),
    ("github PR closed and merged reads merged", "github", "pull_request",
     d.github_pull_request("closed", merged=True),
     dict(
         subject="nimbus/api#12",
         sender="octo-maya",
         body="octo-maya merged pull request nimbus/api#12 (Retry the flaky upload)\n\n## Get Full Context\nhttps://github.com/nimbus/api/pull/12",
         salient_body="octo-maya merged pull request nimbus/api#12 (Retry the flaky upload)",
         lead="octo-maya merged pull request nimbus/api#12 (Retry the flaky upload)",
         partition_key="github:nimbus/api#12",
         conversation_identity="github:nimbus/api#12",
         message_id="",
         addresses=(A("octo-alice", "author", explicit=False),),
         url="https://github.com/nimbus/api/pull/12",
         lifecycle=True,
         metadata={"action": "closed", "repo": "nimbus/api", "number": 12, "title": "Retry the flaky upload"},
     )),
    ("github PR closed unmerged reads closed", "github", "pull_request",
     d.github_pull_request("closed", actor="octo-bob"),
     dict(
         subject="nimbus/api#12",
         sender="octo-bob",
         body="octo-bob closed pull request nimbus/api#12 (Retry the flaky upload)\n\n## Get Full Context\nhttps://github.com/nimbus/api/pull/12",
         salient_body="octo-bob closed pull request nimbus/api#12 (Retry the flaky upload)",
         lead="octo-bob closed pull request nimbus/api#12 (Retry the flaky upload)",
         partition_key="github:nimbus/api#12",
         conversation_identity="github:nimbus/api#12",
         message_id="",
         addresses=(A("octo-alice", "author", explicit=False),),
         url="https://github.com/nimbus/api/pull/12",
         lifecycle=True,
         metadata={"action": "closed", "repo": "nimbus/api", "number": 12, "title": "Retry the flaky upload"},
     )),
    ("github review requested names the reviewer", "github", "pull_request",
     d.github_pull_request("review_requested", requested_reviewer={"login": "octo-bob"}),
     dict(
         subject="nimbus/api#12",
         sender="octo-maya",
         body=(
             "octo-maya review requested pull request nimbus/api#12 (Retry the flaky upload)\n"
             "\n"
             "## Get Full Context\n"
             "https://github.com/nimbus/api/pull/12"
         ),
         salient_body="octo-maya review requested pull request nimbus/api#12 (Retry the flaky upload)",
         lead="octo-maya review requested pull request nimbus/api#12 (Retry the flaky upload)",
         partition_key="github:nimbus/api#12",
         conversation_identity="github:nimbus/api#12",
         message_id="",
         addresses=(A("octo-bob", "reviewer"), A("octo-alice", "author", explicit=False)),
         url="https://github.com/nimbus/api/pull/12",
         lifecycle=True,
         metadata={"action": "review_requested", "repo": "nimbus/api", "number": 12, "title": "Retry the flaky upload"},
     )),
    ("github issue assigned names the assignee", "github", "issues",
     {"action": "assigned", "repository": {"full_name": "nimbus/api"}, "sender": {"login": "octo-maya"}, "assignee": {"login": "octo-bob"},
      "issue": {"number": 5, "title": "Crash on save", "user": {"login": "octo-maya"},
                "html_url": "https://github.com/nimbus/api/issues/5", "assignees": [{"login": "octo-bob"}]}},
     dict(
         subject="nimbus/api#5",
         sender="octo-maya",
         body="octo-maya assigned issue nimbus/api#5 (Crash on save)\n\n## Get Full Context\nhttps://github.com/nimbus/api/issues/5",
         salient_body="octo-maya assigned issue nimbus/api#5 (Crash on save)",
         lead="octo-maya assigned issue nimbus/api#5 (Crash on save)",
         partition_key="github:nimbus/api#5",
         conversation_identity="github:nimbus/api#5",
         message_id="",
         addresses=(A("octo-bob", "assignee"), A("octo-maya", "author", explicit=False), A("octo-bob", "assignee", explicit=False)),
         url="https://github.com/nimbus/api/issues/5",
         lifecycle=True,
         metadata={"action": "assigned", "repo": "nimbus/api", "number": 5, "title": "Crash on save"},
     )),
    ("gitlab MR note", "gitlab", "note",
     d.gitlab_note("@alice-gl can you look? @alice-gl", iid=4, note_id=51),
     dict(
         subject="nimbus/web!4",
         sender="maya-gl",
         body=(
             "maya-gl commented on merge request nimbus/web!4 (Speed up the build)\n"
             "\n"
             "@alice-gl can you look? @alice-gl\n"
             "\n"
             "## Get Full Context\n"
             "https://gitlab.example/nimbus/web/-/merge_requests/4#note_1"
         ),
         salient_body="@alice-gl can you look? @alice-gl",
         lead="maya-gl commented on merge request nimbus/web!4 (Speed up the build)",
         partition_key="gitlab:nimbus/web!4",
         conversation_identity="gitlab:nimbus/web!4",
         message_id="gitlab:note:51",
         addresses=(A("alice-gl", "mention"),),
         url="https://gitlab.example/nimbus/web/-/merge_requests/4#note_1",
         metadata={"project": "nimbus/web", "noteable_type": "MergeRequest", "title": "Speed up the build"},
     )),
    ("gitlab issue note", "gitlab", "note",
     d.gitlab_note("done", iid=9, merge_request=False, note_id=52),
     dict(
         subject="nimbus/web#9",
         sender="maya-gl",
         body=(
             "maya-gl commented on issue nimbus/web#9 (Speed up the build)\n"
             "\n"
             "done\n"
             "\n"
             "## Get Full Context\n"
             "https://gitlab.example/nimbus/web/-/issues/9#note_1"
         ),
         salient_body="done",
         lead="maya-gl commented on issue nimbus/web#9 (Speed up the build)",
         partition_key="gitlab:nimbus/web#9",
         conversation_identity="gitlab:nimbus/web#9",
         message_id="gitlab:note:52",
         url="https://gitlab.example/nimbus/web/-/issues/9#note_1",
         metadata={"project": "nimbus/web", "noteable_type": "Issue", "title": "Speed up the build"},
     )),
    ("gitlab commit note keys on nothing", "gitlab", "note",
     {"object_kind": "note", "user": {"username": "maya-gl"}, "project": {"path_with_namespace": "nimbus/web"},
      "object_attributes": {"id": 77, "note": "typo here", "noteable_type": "Commit", "url": "https://gitlab.example/nimbus/web/-/commit/abc#note_77"}},
     dict(
         subject="nimbus/web commit",
         sender="maya-gl",
         body=(
             "maya-gl commented on commit nimbus/web commit\n"
             "\n"
             "typo here\n"
             "\n"
             "## Get Full Context\n"
             "https://gitlab.example/nimbus/web/-/commit/abc#note_77"
         ),
         salient_body="typo here",
         lead="maya-gl commented on commit nimbus/web commit",
         partition_key="",
         conversation_identity="",
         message_id="gitlab:note:77",
         url="https://gitlab.example/nimbus/web/-/commit/abc#note_77",
         metadata={"project": "nimbus/web", "noteable_type": "Commit", "title": ""},
     )),
    ("gitlab MR opened: its description, mentions, the assignees and reviewers", "gitlab", "merge_request",
     {"object_kind": "merge_request", "user": {"username": "maya-gl"}, "project": {"path_with_namespace": "nimbus/web"},
      "object_attributes": {"iid": 9, "action": "open", "title": "Speed up the build", "description": "Ready. @alice-gl",
                            "url": "https://gitlab.example/nimbus/web/-/merge_requests/9"},
      "assignees": [{"username": "bob-gl"}], "reviewers": [{"username": "carl-gl"}]},
     dict(
         subject="nimbus/web!9",
         sender="maya-gl",
         body=(
             "maya-gl opened merge request nimbus/web!9 (Speed up the build)\n"
             "\n"
             "Ready. @alice-gl\n"
             "\n"
             "## Get Full Context\n"
             "https://gitlab.example/nimbus/web/-/merge_requests/9"
         ),
         salient_body="Ready. @alice-gl",
         lead="maya-gl opened merge request nimbus/web!9 (Speed up the build)",
         partition_key="gitlab:nimbus/web!9",
         conversation_identity="gitlab:nimbus/web!9",
         message_id="",
         addresses=(A("alice-gl", "mention"), A("bob-gl", "assignee", explicit=False), A("carl-gl", "reviewer", explicit=False)),
         url="https://gitlab.example/nimbus/web/-/merge_requests/9",
         lifecycle=True,
         metadata={"project": "nimbus/web", "action": "open", "iid": 9, "title": "Speed up the build"},
     )),
    ("gitlab MR merged", "gitlab", "merge_request",
     {"object_kind": "merge_request", "user": {"username": "alice-gl"}, "project": {"path_with_namespace": "nimbus/web"},
      "object_attributes": {"iid": 9, "action": "merge", "title": "Speed up the build", "description": "Ready.",
                            "url": "https://gitlab.example/nimbus/web/-/merge_requests/9"}},
     dict(
         subject="nimbus/web!9",
         sender="alice-gl",
         body=(
             "alice-gl merged merge request nimbus/web!9 (Speed up the build)\n"
             "\n"
             "## Get Full Context\n"
             "https://gitlab.example/nimbus/web/-/merge_requests/9"
         ),
         salient_body="alice-gl merged merge request nimbus/web!9 (Speed up the build)",
         lead="alice-gl merged merge request nimbus/web!9 (Speed up the build)",
         partition_key="gitlab:nimbus/web!9",
         conversation_identity="gitlab:nimbus/web!9",
         message_id="",
         url="https://gitlab.example/nimbus/web/-/merge_requests/9",
         lifecycle=True,
         metadata={"project": "nimbus/web", "action": "merge", "iid": 9, "title": "Speed up the build"},
     )),
    ("gitlab MR update naming new assignees and reviewers", "gitlab", "merge_request",
     {"object_kind": "merge_request", "user": {"username": "maya-gl"}, "project": {"path_with_namespace": "nimbus/web"},
      "object_attributes": {"iid": 9, "action": "update", "title": "Speed up the build"},
      "changes": {"assignees": {"previous": [{"username": "bob-gl"}], "current": [{"username": "bob-gl"}, {"username": "alice-gl"}]},
                  "reviewers": {"previous": [], "current": [{"username": "carl-gl"}]}},
      "assignees": [{"username": "bob-gl"}, {"username": "alice-gl"}], "reviewers": [{"username": "carl-gl"}]},
     dict(
         subject="nimbus/web!9",
         sender="maya-gl",
         body="maya-gl updated merge request nimbus/web!9 (Speed up the build)",
         salient_body="maya-gl updated merge request nimbus/web!9 (Speed up the build)",
         lead="maya-gl updated merge request nimbus/web!9 (Speed up the build)",
         partition_key="gitlab:nimbus/web!9",
         conversation_identity="gitlab:nimbus/web!9",
         message_id="",
         addresses=(
             A("alice-gl", "assignee"),
             A("carl-gl", "reviewer"),
             A("bob-gl", "assignee", explicit=False),
             A("alice-gl", "assignee", explicit=False),
             A("carl-gl", "reviewer", explicit=False),
         ),
         lifecycle=True,
         metadata={"project": "nimbus/web", "action": "update", "iid": 9, "title": "Speed up the build"},
     )),
    ("gitlab issue closed", "gitlab", "issue",
     {"object_kind": "issue", "user": {"username": "maya-gl"}, "project": {"path_with_namespace": "nimbus/web"},
      "object_attributes": {"iid": 3, "action": "close", "title": "Flaky build", "url": "https://gitlab.example/nimbus/web/-/issues/3"}},
     dict(
         subject="nimbus/web#3",
         sender="maya-gl",
         body="maya-gl closed issue nimbus/web#3 (Flaky build)\n\n## Get Full Context\nhttps://gitlab.example/nimbus/web/-/issues/3",
         salient_body="maya-gl closed issue nimbus/web#3 (Flaky build)",
         lead="maya-gl closed issue nimbus/web#3 (Flaky build)",
         partition_key="gitlab:nimbus/web#3",
         conversation_identity="gitlab:nimbus/web#3",
         message_id="",
         url="https://gitlab.example/nimbus/web/-/issues/3",
         lifecycle=True,
         metadata={"project": "nimbus/web", "action": "close", "iid": 3, "title": "Flaky build"},
     )),
    ("jira comment: mentions by account id and by name, the assignee", "jira", "comment_created",
     d.jira_event("comment_created", text="[~accountid:acc-bob] and [~carl], please look", comment_id="10031",
                 assignee={"accountId": "acc-alice", "emailAddress": "alice@nimbus.example", "displayName": "Alice"}),
     dict(
         subject="POC-7",
         sender="acc-maya",
         body=(
             "Maya commented on POC-7 (Upload fails)\n"
             "\n"
             "[~accountid:acc-bob] and [~carl], please look\n"
             "\n"
             "## Get Full Context\n"
             "https://nimbus.atlassian.net/browse/POC-7"
         ),
         salient_body="[~accountid:acc-bob] and [~carl], please look",
         lead="Maya commented on POC-7 (Upload fails)",
         partition_key="jira:POC-7",
         conversation_identity="jira:POC-7",
         message_id="jira:comment:10031",
         addresses=(A("acc-bob", "mention"), A("carl", "mention"), A("acc-alice", "assignee", explicit=False, aka=("alice@nimbus.example", "Alice"))),
         url="https://nimbus.atlassian.net/browse/POC-7",
         sender_aka=("Maya",),
         metadata={"issue": "POC-7", "summary": "Upload fails", "issue_event_type": "", "status": "In Progress"},
     )),
    ("jira issue created: its description", "jira", "jira:issue_created",
     d.jira_event("jira:issue_created", author={"accountId": "acc-maya", "emailAddress": "maya@nimbus.example", "displayName": "Maya"}),
     dict(
         subject="POC-7",
         sender="acc-maya",
         body="Maya created POC-7 (Upload fails)\n\nLong description\n\n## Get Full Context\nhttps://nimbus.atlassian.net/browse/POC-7",
         salient_body="Long description",
         lead="Maya created POC-7 (Upload fails)",
         partition_key="jira:POC-7",
         conversation_identity="jira:POC-7",
         message_id="",
         url="https://nimbus.atlassian.net/browse/POC-7",
         lifecycle=True,
         sender_aka=("maya@nimbus.example", "Maya"),
         metadata={"issue": "POC-7", "summary": "Upload fails", "issue_event_type": "", "status": "In Progress"},
     )),
    ("jira issue updated: the changelog, the newly assigned", "jira", "jira:issue_updated",
     d.jira_event("jira:issue_updated", assignee={"accountId": "acc-bob", "displayName": "Bob"}, issue_event_type_name="issue_assigned",
                 changelog={"items": [{"field": "status", "fromString": "To Do", "toString": "In Progress"},
                                      {"field": "assignee", "fromString": None, "toString": "Bob", "to": "acc-bob"}]}),
     dict(
         subject="POC-7",
         sender="acc-maya",
         body=(
             "Maya updated POC-7 (status: To Do -> In Progress; assignee: - -> Bob) (Upload fails)\n"
             "\n"
             "status: To Do -> In Progress\n"
             "assignee: - -> Bob\n"
             "\n"
             "Description:\n"
             "Long description\n"
             "\n"
             "## Get Full Context\n"
             "https://nimbus.atlassian.net/browse/POC-7"
         ),
         salient_body="status: To Do -> In Progress\nassignee: - -> Bob\n\nDescription:\nLong description",
         lead="Maya updated POC-7 (status: To Do -> In Progress; assignee: - -> Bob) (Upload fails)",
         partition_key="jira:POC-7",
         conversation_identity="jira:POC-7",
         message_id="",
         addresses=(A("acc-bob", "assignee", aka=("Bob",)), A("acc-bob", "assignee", explicit=False, aka=("Bob",))),
         url="https://nimbus.atlassian.net/browse/POC-7",
         lifecycle=True,
         sender_aka=("Maya",),
         metadata={"issue": "POC-7", "summary": "Upload fails", "issue_event_type": "issue_assigned", "status": "In Progress"},
     )),
    ("jira issue updated without a changelog: the description alone", "jira", "jira:issue_updated",
     d.jira_event("jira:issue_updated", author={"name": "maya"}),
     dict(
         subject="POC-7",
         sender="maya",
         body="maya updated POC-7 (Upload fails)\n\nDescription:\nLong description\n\n## Get Full Context\nhttps://nimbus.atlassian.net/browse/POC-7",
         salient_body="Description:\nLong description",
         lead="maya updated POC-7 (Upload fails)",
         partition_key="jira:POC-7",
         conversation_identity="jira:POC-7",
         message_id="",
         url="https://nimbus.atlassian.net/browse/POC-7",
         lifecycle=True,
         metadata={"issue": "POC-7", "summary": "Upload fails", "issue_event_type": "", "status": "In Progress"},
     )),
    ("slack channel message", "slack", "message",
     d.slack_message("<@U0ALICE> and <@U0BOB|bob> ask", channel="C9", ts="1718.001"),
     dict(
         subject="C9:1718.001",
         sender="U0MAYA",
         body="U0MAYA wrote in C9\n\n<@U0ALICE> and <@U0BOB|bob> ask",
         salient_body="<@U0ALICE> and <@U0BOB|bob> ask",
         lead="U0MAYA wrote in C9",
         partition_key="slack:C9:1718.001",
         conversation_identity="slack:C9:1718.001",
         message_id="slack:C9:1718.001",
         addresses=(A("U0ALICE", "mention"), A("U0BOB", "mention")),
         thread="slack:C9:1718.001",
         metadata={"channel": "C9", "ts": "1718.001", "thread_ts": "", "channel_type": "channel", "team": "T1", "reply": False, "direct": False},
     )),
    ("slack thread reply", "slack", "message",
     d.slack_message("reply", channel="C9", ts="1718.002", thread_ts="1718.001"),
     dict(
         subject="C9:1718.001",
         sender="U0MAYA",
         body="U0MAYA replied in C9 (thread 1718.001)\n\nreply",
         salient_body="reply",
         lead="U0MAYA replied in C9 (thread 1718.001)",
         partition_key="slack:C9:1718.001",
         conversation_identity="slack:C9:1718.001",
         message_id="slack:C9:1718.002",
         thread="slack:C9:1718.001",
         metadata={
             "channel": "C9",
             "ts": "1718.002",
             "thread_ts": "1718.001",
             "channel_type": "channel",
             "team": "T1",
             "reply": True,
             "direct": False,
         },
     )),
    ("slack DM reaches the app user it was delivered for", "slack", "message",
     d.slack_message("are you there?", channel="D1", ts="1718.003", channel_type="im", user="U0MAYA", app_user="U0ALICE"),
     dict(
         subject="D1",
         sender="U0MAYA",
         body="U0MAYA wrote in a direct message\n\nare you there?",
         salient_body="are you there?",
         lead="U0MAYA wrote in a direct message",
         partition_key="slack:D1",
         conversation_identity="slack:D1",
         message_id="slack:D1:1718.003",
         addresses=(A("U0ALICE", "dm"),),
         metadata={"channel": "D1", "ts": "1718.003", "thread_ts": "", "channel_type": "im", "team": "T1", "reply": False, "direct": True},
     )),
    ("slack DM delivered through authed_users", "slack", "message",
     {**d.slack_message("hi", channel="D2", ts="1718.004", channel_type="im"), "authorizations": [], "authed_users": ["U0BOB", "U0BOB", ""]},
     dict(
         subject="D2",
         sender="U0MAYA",
         body="U0MAYA wrote in a direct message\n\nhi",
         salient_body="hi",
         lead="U0MAYA wrote in a direct message",
         partition_key="slack:D2",
         conversation_identity="slack:D2",
         message_id="slack:D2:1718.004",
         addresses=(A("U0BOB", "dm"),),
         metadata={"channel": "D2", "ts": "1718.004", "thread_ts": "", "channel_type": "im", "team": "T1", "reply": False, "direct": True},
     )),
    ("mattermost channel post", "mattermost", "posted",
     d.mattermost_post("@alice-mm and @bob-mm please", channel="ch1", post_id="p1"),
     dict(
         subject="ch1:p1",
         sender="maya-mm",
         body="maya-mm wrote in ~town-square\n\n@alice-mm and @bob-mm please",
         salient_body="@alice-mm and @bob-mm please",
         lead="maya-mm wrote in ~town-square",
         partition_key="mattermost:ch1:p1",
         conversation_identity="mattermost:ch1:p1",
         message_id="mattermost:p1",
         addresses=(A("alice-mm", "mention"), A("bob-mm", "mention")),
         thread="mattermost:ch1:p1",
         sender_aka=("uuuuuuuuuuuuuuuuuuuuuuuuuu",),
         metadata={
             "channel": "ch1",
             "channel_name": "town-square",
             "post_id": "p1",
             "root_id": "",
             "team": "nimbus",
             "reply": False,
             "direct": False,
             "trigger_word": "",
         },
     )),
    ("mattermost thread reply", "mattermost", "posted",
     d.mattermost_post("reply", channel="ch1", post_id="p2", root_id="p1", channel_name=""),
     dict(
         subject="ch1:p1",
         sender="maya-mm",
         body="maya-mm replied in ch1 (thread p1)\n\nreply",
         salient_body="reply",
         lead="maya-mm replied in ch1 (thread p1)",
         partition_key="mattermost:ch1:p1",
         conversation_identity="mattermost:ch1:p1",
         message_id="mattermost:p2",
         thread="mattermost:ch1:p1",
         sender_aka=("uuuuuuuuuuuuuuuuuuuuuuuuuu",),
         metadata={
             "channel": "ch1",
             "channel_name": "",
             "post_id": "p2",
             "root_id": "p1",
             "team": "nimbus",
             "reply": True,
             "direct": False,
             "trigger_word": "",
         },
     )),
    ("mattermost DM by its a__b name reaches the other user", "mattermost", "posted",
     d.mattermost_post("hello", channel="dm1", post_id="p3", user_id="a" * 26, channel_name=f"{'a' * 26}__{'b' * 26}", trigger_word="hello"),
     dict(
         subject="dm1",
         sender="maya-mm",
         body="maya-mm wrote in a direct message\n\nhello",
         salient_body="hello",
         lead="maya-mm wrote in a direct message",
         partition_key="mattermost:dm1",
         conversation_identity="mattermost:dm1",
         message_id="mattermost:p3",
         addresses=(A("bbbbbbbbbbbbbbbbbbbbbbbbbb", "dm"),),
         sender_aka=("aaaaaaaaaaaaaaaaaaaaaaaaaa",),
         metadata={
             "channel": "dm1",
             "channel_name": "aaaaaaaaaaaaaaaaaaaaaaaaaa__bbbbbbbbbbbbbbbbbbbbbbbbbb",
             "post_id": "p3",
             "root_id": "",
             "team": "nimbus",
             "reply": False,
             "direct": True,
             "trigger_word": "hello",
         },
     )),
    # sparse deliveries: what each parser reads when a field is absent
    ("github comment without its author or title reads the sender and the issue's url", "github", "issue_comment",
     {"action": "created", "repository": {"full_name": "nimbus/api"}, "sender": {"login": "octo-maya"},
      "issue": {"number": 1, "html_url": "https://github.com/nimbus/api/issues/1"}, "comment": {"body": "hi"}},
     dict(
         subject="nimbus/api#1",
         sender="octo-maya",
         body="octo-maya commented on issue nimbus/api#1\n\nhi\n\n## Get Full Context\nhttps://github.com/nimbus/api/issues/1",
         salient_body="hi",
         lead="octo-maya commented on issue nimbus/api#1",
         partition_key="github:nimbus/api#1",
         conversation_identity="github:nimbus/api#1",
         message_id="",
         url="https://github.com/nimbus/api/issues/1",
         metadata={"action": "created", "repo": "nimbus/api", "number": 1, "title": ""},
     )),
    ("github comment from nobody named reads someone", "github", "issue_comment",
     {"action": "created", "repository": {"full_name": "nimbus/api"}, "issue": {"number": 1}, "comment": {}},
     dict(
         subject="nimbus/api#1",
         sender="",
         body="someone commented on issue nimbus/api#1",
         salient_body="",
         lead="someone commented on issue nimbus/api#1",
         partition_key="github:nimbus/api#1",
         conversation_identity="github:nimbus/api#1",
         message_id="",
         metadata={"action": "created", "repo": "nimbus/api", "number": 1, "title": ""},
     )),
    ("github review without a state reads commented", "github", "pull_request_review",
     {"action": "submitted", "repository": {"full_name": "nimbus/api"}, "pull_request": {"number": 12},
      "review": {"id": 8, "user": {"login": "octo-bob"}}},
     dict(
         subject="nimbus/api#12",
         sender="octo-bob",
         body="octo-bob reviewed (commented) pull request nimbus/api#12",
         salient_body="",
         lead="octo-bob reviewed (commented) pull request nimbus/api#12",
         partition_key="github:nimbus/api#12",
         conversation_identity="github:nimbus/api#12",
         message_id="github:pull_request_review:8",
         metadata={"action": "submitted", "repo": "nimbus/api", "number": 12, "title": ""},
     )),
    ("github PR reopened by nobody named: only an opened PR's description is read", "github", "pull_request",
     {"action": "reopened", "repository": {"full_name": "nimbus/api"},
      "pull_request": {"number": 2, "body": "@octo-bob an old description", "user": {"login": "octo-alice"}}},
     dict(
         subject="nimbus/api#2",
         sender="",
         body="someone reopened pull request nimbus/api#2",
         salient_body="someone reopened pull request nimbus/api#2",
         lead="someone reopened pull request nimbus/api#2",
         partition_key="github:nimbus/api#2",
         conversation_identity="github:nimbus/api#2",
         message_id="",
         addresses=(A("octo-alice", "author", explicit=False),),
         lifecycle=True,
         metadata={"action": "reopened", "repo": "nimbus/api", "number": 2, "title": ""},
     )),
    ("github review requested of a team names no one", "github", "pull_request",
     d.github_pull_request("review_requested", requested_team={"name": "core"}),
     dict(
         subject="nimbus/api#12",
         sender="octo-maya",
         body=(
             "octo-maya review requested pull request nimbus/api#12 (Retry the flaky upload)\n"
             "\n"
             "## Get Full Context\n"
             "https://github.com/nimbus/api/pull/12"
         ),
         salient_body="octo-maya review requested pull request nimbus/api#12 (Retry the flaky upload)",
         lead="octo-maya review requested pull request nimbus/api#12 (Retry the flaky upload)",
         partition_key="github:nimbus/api#12",
         conversation_identity="github:nimbus/api#12",
         message_id="",
         addresses=(A("octo-alice", "author", explicit=False),),
         url="https://github.com/nimbus/api/pull/12",
         lifecycle=True,
         metadata={"action": "review_requested", "repo": "nimbus/api", "number": 12, "title": "Retry the flaky upload"},
     )),
    ("gitlab MR reopened by nobody named, untitled", "gitlab", "merge_request",
     {"object_kind": "merge_request", "project": {"path_with_namespace": "nimbus/web"}, "object_attributes": {"iid": 9, "action": "reopen"},
      "assignees": [{"username": "bob-gl"}, {}], "reviewers": [{"username": ""}]},
     dict(
         subject="nimbus/web!9",
         sender="",
         body="someone reopened merge request nimbus/web!9",
         salient_body="someone reopened merge request nimbus/web!9",
         lead="someone reopened merge request nimbus/web!9",
         partition_key="gitlab:nimbus/web!9",
         conversation_identity="gitlab:nimbus/web!9",
         message_id="",
         addresses=(A("bob-gl", "assignee", explicit=False),),
         lifecycle=True,
         metadata={"project": "nimbus/web", "action": "reopen", "iid": 9, "title": ""},
     )),
    ("gitlab MR approved", "gitlab", "merge_request",
     {"object_kind": "merge_request", "project": {"path_with_namespace": "nimbus/web"}, "object_attributes": {"iid": 9, "action": "approved"}},
     dict(
         subject="nimbus/web!9",
         sender="",
         body="someone approved merge request nimbus/web!9",
         salient_body="someone approved merge request nimbus/web!9",
         lead="someone approved merge request nimbus/web!9",
         partition_key="gitlab:nimbus/web!9",
         conversation_identity="gitlab:nimbus/web!9",
         message_id="",
         lifecycle=True,
         metadata={"project": "nimbus/web", "action": "approved", "iid": 9, "title": ""},
     )),
    ("gitlab MR unapproved", "gitlab", "merge_request",
     {"object_kind": "merge_request", "project": {"path_with_namespace": "nimbus/web"}, "object_attributes": {"iid": 9, "action": "unapproved"}},
     dict(
         subject="nimbus/web!9",
         sender="",
         body="someone unapproved merge request nimbus/web!9",
         salient_body="someone unapproved merge request nimbus/web!9",
         lead="someone unapproved merge request nimbus/web!9",
         partition_key="gitlab:nimbus/web!9",
         conversation_identity="gitlab:nimbus/web!9",
         message_id="",
         lifecycle=True,
         metadata={"project": "nimbus/web", "action": "unapproved", "iid": 9, "title": ""},
     )),
    ("gitlab MR action the parser does not name reads as itself", "gitlab", "merge_request",
     {"object_kind": "merge_request", "project": {"path_with_namespace": "nimbus/web"}, "object_attributes": {"iid": 9, "action": "approval"}},
     dict(
         subject="nimbus/web!9",
         sender="",
         body="someone approval merge request nimbus/web!9",
         salient_body="someone approval merge request nimbus/web!9",
         lead="someone approval merge request nimbus/web!9",
         partition_key="gitlab:nimbus/web!9",
         conversation_identity="gitlab:nimbus/web!9",
         message_id="",
         lifecycle=True,
         metadata={"project": "nimbus/web", "action": "approval", "iid": 9, "title": ""},
     )),
    ("gitlab issue without an action reads changed", "gitlab", "issue",
     {"object_kind": "issue", "project": {"path_with_namespace": "nimbus/web"}, "object_attributes": {"iid": 3}},
     dict(
         subject="nimbus/web#3",
         sender="",
         body="someone changed issue nimbus/web#3",
         salient_body="someone changed issue nimbus/web#3",
         lead="someone changed issue nimbus/web#3",
         partition_key="gitlab:nimbus/web#3",
         conversation_identity="gitlab:nimbus/web#3",
         message_id="",
         lifecycle=True,
         metadata={"project": "nimbus/web", "action": "", "iid": 3, "title": ""},
     )),
    ("gitlab note on something without a type, from nobody named", "gitlab", "note",
     {"object_kind": "note", "project": {"path_with_namespace": "nimbus/web"}, "object_attributes": {"noteable_type": ""}},
     dict(
         subject="nimbus/web object",
         sender="",
         body="someone commented on object nimbus/web object",
         salient_body="",
         lead="someone commented on object nimbus/web object",
         partition_key="",
         conversation_identity="",
         message_id="",
         metadata={"project": "nimbus/web", "noteable_type": "", "title": ""},
     )),
    ("jira comment without an author, its user not an object", "jira", "comment_created",
     {"webhookEvent": "comment_created", "user": "maya", "issue": {"key": "POC-7", "self": "https://nimbus.example/no-api-path"},
      "comment": {"id": "", "body": ""}},
     dict(
         subject="POC-7",
         sender="",
         body="someone commented on POC-7",
         salient_body="someone commented on POC-7",
         lead="someone commented on POC-7",
         partition_key="jira:POC-7",
         conversation_identity="jira:POC-7",
         message_id="",
         metadata={"issue": "POC-7", "summary": "", "issue_event_type": "", "status": ""},
     )),
    ("jira comment event whose comment is not an object reads as an update", "jira", "comment_created",
     {"webhookEvent": "comment_created", "issue": {"key": "POC-7", "fields": "not an object"}, "comment": "hello"},
     dict(
         subject="POC-7",
         sender="",
         body="someone updated POC-7",
         salient_body="someone updated POC-7",
         lead="someone updated POC-7",
         partition_key="jira:POC-7",
         conversation_identity="jira:POC-7",
         message_id="",
         lifecycle=True,
         metadata={"issue": "POC-7", "summary": "", "issue_event_type": "", "status": ""},
     )),
    ("jira issue created by an unnamed reporter without a description", "jira", "jira:issue_created",
     {"webhookEvent": "jira:issue_created", "user": {}, "issue": {"key": "POC-8", "fields": {"assignee": {}}}},
     dict(
         subject="POC-8",
         sender="",
         body="someone created POC-8",
         salient_body="someone created POC-8",
         lead="someone created POC-8",
         partition_key="jira:POC-8",
         conversation_identity="jira:POC-8",
         message_id="",
         lifecycle=True,
         metadata={"issue": "POC-8", "summary": "", "issue_event_type": "", "status": ""},
     )),
    ("jira changelog assignment alone names the new assignee", "jira", "jira:issue_updated",
     {"webhookEvent": "jira:issue_updated", "user": {"key": "maya-key"},
      "issue": {"key": "POC-7", "fields": {"assignee": {"key": "bob-key"}}},
      "changelog": {"items": [{"field": "assignee", "to": "bob-key", "toString": "Bob"}, "junk", {"fromString": "x"}]}},
     dict(
         subject="POC-7",
         sender="maya-key",
         body="maya-key updated POC-7 (assignee: - -> Bob)\n\nassignee: - -> Bob",
         salient_body="assignee: - -> Bob",
         lead="maya-key updated POC-7 (assignee: - -> Bob)",
         partition_key="jira:POC-7",
         conversation_identity="jira:POC-7",
         message_id="",
         addresses=(A("bob-key", "assignee"), A("bob-key", "assignee", explicit=False)),
         lifecycle=True,
         metadata={"issue": "POC-7", "summary": "", "issue_event_type": "", "status": ""},
     )),
    ("jira issue_assigned alone names the assignee", "jira", "jira:issue_updated",
     {"webhookEvent": "jira:issue_updated", "issue_event_type_name": "issue_assigned",
      "issue": {"key": "POC-7", "fields": {"assignee": {"name": "bob"}}}},
     dict(
         subject="POC-7",
         sender="",
         body="someone updated POC-7",
         salient_body="someone updated POC-7",
         lead="someone updated POC-7",
         partition_key="jira:POC-7",
         conversation_identity="jira:POC-7",
         message_id="",
         addresses=(A("bob", "assignee"), A("bob", "assignee", explicit=False)),
         lifecycle=True,
         metadata={"issue": "POC-7", "summary": "", "issue_event_type": "issue_assigned", "status": ""},
     )),
    ("jira unassignment names nobody", "jira", "jira:issue_updated",
     {"webhookEvent": "jira:issue_updated", "issue_event_type_name": "issue_updated",
      "issue": {"key": "POC-7", "fields": {"assignee": None}},
      "changelog": {"items": [{"field": "assignee", "fromString": "Bob", "from": "acc-bob", "to": None}]}},
     dict(
         subject="POC-7",
         sender="",
         body="someone updated POC-7 (assignee: Bob -> -)\n\nassignee: Bob -> -",
         salient_body="assignee: Bob -> -",
         lead="someone updated POC-7 (assignee: Bob -> -)",
         partition_key="jira:POC-7",
         conversation_identity="jira:POC-7",
         message_id="",
         lifecycle=True,
         metadata={"issue": "POC-7", "summary": "", "issue_event_type": "issue_updated", "status": ""},
     )),
    ("slack DM from nobody named, mentioning someone, its channel type absent", "slack", "message",
     {"type": "event_callback", "event": {"type": "message", "channel": "D3", "ts": "1718.005", "text": "<@U0BOB> look"},
      "authorizations": [{}, {"user_id": "U0ALICE"}]},
     dict(
         subject="D3",
         sender="",
         body="someone wrote in a direct message\n\n<@U0BOB> look",
         salient_body="<@U0BOB> look",
         lead="someone wrote in a direct message",
         partition_key="slack:D3",
         conversation_identity="slack:D3",
         message_id="slack:D3:1718.005",
         addresses=(A("U0BOB", "mention"), A("U0ALICE", "dm")),
         metadata={"channel": "D3", "ts": "1718.005", "thread_ts": "", "channel_type": "", "team": "", "reply": False, "direct": True},
     )),
    ("mattermost post in a group channel from a user id alone", "mattermost", "posted",
     {"channel_id": "g1", "post_id": "p7", "user_id": "u1", "channel_type": "G", "team_id": "t1", "delete_at": 0, "type": ""},
     dict(
         subject="g1",
         sender="u1",
         body="u1 wrote in a direct message",
         salient_body="",
         lead="u1 wrote in a direct message",
         partition_key="mattermost:g1",
         conversation_identity="mattermost:g1",
         message_id="mattermost:p7",
         metadata={
             "channel": "g1",
             "channel_name": "",
             "post_id": "p7",
             "root_id": "",
             "team": "t1",
             "reply": False,
             "direct": True,
             "trigger_word": "",
         },
     )),
    ("mattermost DM by name, mentioning someone", "mattermost", "posted",
     d.mattermost_post("@carl-mm see this", channel="dm1", post_id="p8", user_id="a" * 26, channel_name=f"{'a' * 26}__{'b' * 26}"),
     dict(
         subject="dm1",
         sender="maya-mm",
         body="maya-mm wrote in a direct message\n\n@carl-mm see this",
         salient_body="@carl-mm see this",
         lead="maya-mm wrote in a direct message",
         partition_key="mattermost:dm1",
         conversation_identity="mattermost:dm1",
         message_id="mattermost:p8",
         addresses=(A("carl-mm", "mention"), A("bbbbbbbbbbbbbbbbbbbbbbbbbb", "dm")),
         sender_aka=("aaaaaaaaaaaaaaaaaaaaaaaaaa",),
         metadata={
             "channel": "dm1",
             "channel_name": "aaaaaaaaaaaaaaaaaaaaaaaaaa__bbbbbbbbbbbbbbbbbbbbbbbbbb",
             "post_id": "p8",
             "root_id": "",
             "team": "nimbus",
             "reply": False,
             "direct": True,
             "trigger_word": "",
         },
     )),
    ("github issue opened without a description", "github", "issues",
     {"action": "opened", "repository": {"full_name": "nimbus/api"}, "sender": {"login": "octo-maya"}, "issue": {"number": 6, "title": "Crash"}},
     dict(
         subject="nimbus/api#6",
         sender="octo-maya",
         body="octo-maya opened issue nimbus/api#6 (Crash)",
         salient_body="octo-maya opened issue nimbus/api#6 (Crash)",
         lead="octo-maya opened issue nimbus/api#6 (Crash)",
         partition_key="github:nimbus/api#6",
         conversation_identity="github:nimbus/api#6",
         message_id="",
         lifecycle=True,
         metadata={"action": "opened", "repo": "nimbus/api", "number": 6, "title": "Crash"},
     )),
    ("gitlab issue opened without a description", "gitlab", "issue",
     {"object_kind": "issue", "user": {"username": "maya-gl"}, "project": {"path_with_namespace": "nimbus/web"},
      "object_attributes": {"iid": 4, "action": "open", "title": "Crash"}},
     dict(
         subject="nimbus/web#4",
         sender="maya-gl",
         body="maya-gl opened issue nimbus/web#4 (Crash)",
         salient_body="maya-gl opened issue nimbus/web#4 (Crash)",
         lead="maya-gl opened issue nimbus/web#4 (Crash)",
         partition_key="gitlab:nimbus/web#4",
         conversation_identity="gitlab:nimbus/web#4",
         message_id="",
         lifecycle=True,
         metadata={"project": "nimbus/web", "action": "open", "iid": 4, "title": "Crash"},
     )),
    ("jira status change carrying ids names the assignee implicitly only", "jira", "jira:issue_updated",
     {"webhookEvent": "jira:issue_updated", "user": {"accountId": "acc-maya"},
      "issue": {"key": "POC-7", "fields": {"assignee": {"accountId": "acc-bob"}}},
      "changelog": {"items": [{"field": "status", "from": "10000", "fromString": "To Do", "to": "10001", "toString": "Done"}]}},
     dict(
         subject="POC-7",
         sender="acc-maya",
         body="acc-maya updated POC-7 (status: To Do -> Done)\n\nstatus: To Do -> Done",
         salient_body="status: To Do -> Done",
         lead="acc-maya updated POC-7 (status: To Do -> Done)",
         partition_key="jira:POC-7",
         conversation_identity="jira:POC-7",
         message_id="",
         addresses=(A("acc-bob", "assignee", explicit=False),),
         lifecycle=True,
         metadata={"issue": "POC-7", "summary": "", "issue_event_type": "", "status": ""},
     )),
    ("jira comment: its author is the sender, not the webhook's user", "jira", "comment_created",
     {"webhookEvent": "comment_created", "user": {"accountId": "acc-maya"}, "issue": {"key": "POC-7"},
      "comment": {"id": "10040", "body": "done", "author": {"accountId": "acc-bob", "displayName": "Bob"}}},
     dict(
         subject="POC-7",
         sender="acc-bob",
         body="Bob commented on POC-7\n\ndone",
         salient_body="done",
         lead="Bob commented on POC-7",
         partition_key="jira:POC-7",
         conversation_identity="jira:POC-7",
         message_id="jira:comment:10040",
         sender_aka=("Bob",),
         metadata={"issue": "POC-7", "summary": "", "issue_event_type": "", "status": ""},
     )),
    ("slack message without text", "slack", "message",
     {"type": "event_callback", "event": {"type": "message", "subtype": "file_share", "channel": "C9", "user": "U0MAYA", "ts": "1718.006"}},
     dict(
         subject="C9:1718.006",
         sender="U0MAYA",
         body="U0MAYA wrote in C9",
         salient_body="",
         lead="U0MAYA wrote in C9",
         partition_key="slack:C9:1718.006",
         conversation_identity="slack:C9:1718.006",
         message_id="slack:C9:1718.006",
         thread="slack:C9:1718.006",
         metadata={"channel": "C9", "ts": "1718.006", "thread_ts": "", "channel_type": "", "team": "", "reply": False, "direct": False},
     )),
    ("mattermost post without a team", "mattermost", "posted",
     {"channel_id": "ch2", "post_id": "p9", "user_name": "maya-mm", "text": "hi"},
     dict(
         subject="ch2:p9",
         sender="maya-mm",
         body="maya-mm wrote in ch2\n\nhi",
         salient_body="hi",
         lead="maya-mm wrote in ch2",
         partition_key="mattermost:ch2:p9",
         conversation_identity="mattermost:ch2:p9",
         message_id="mattermost:p9",
         thread="mattermost:ch2:p9",
         metadata={
             "channel": "ch2",
             "channel_name": "",
             "post_id": "p9",
             "root_id": "",
             "team": "",
             "reply": False,
             "direct": False,
             "trigger_word": "",
         },
     )),
]


@pytest.mark.parametrize("case, source, kind, payload, fields", NOTIFICATIONS, ids=[c[0] for c in NOTIFICATIONS])
def test_a_delivery_reads_into_the_notification_its_seats_are_woken_with(case, source, kind, payload, fields):
    assert source_named(source) is SOURCES[source]
    assert SOURCES[source].parse(kind, payload) == Notification(source=source, event_kind=kind, **fields)


NOBODY = [
    ("a github comment edited", "github", "issue_comment", {**d.github_comment("@octo-alice"), "action": "edited"}),
    ("a github pull request labeled", "github", "pull_request", d.github_pull_request("labeled")),
    ("a github push", "github", "push", {"ref": "refs/heads/main", "repository": {"full_name": "nimbus/api"}}),
    ("a gitlab update naming nobody new", "gitlab", "merge_request",
     {"object_kind": "merge_request", "project": {"path_with_namespace": "nimbus/web"},
      "object_attributes": {"iid": 9, "action": "update"}, "changes": {"title": {"previous": "a", "current": "b"}}}),
    ("a gitlab pipeline", "gitlab", "pipeline", {"object_kind": "pipeline", "project": {"path_with_namespace": "nimbus/web"}}),
    ("a jira issue deleted", "jira", "jira:issue_deleted", d.jira_event("jira:issue_deleted")),
    ("a jira comment edited", "jira", "comment_updated", d.jira_event("comment_updated")),
    ("a jira comment deleted", "jira", "comment_deleted", d.jira_event("comment_deleted")),
    ("a jira sprint event", "jira", "sprint_started", {"webhookEvent": "sprint_started", "sprint": {"id": 1}}),
    ("a slack reaction", "slack", "reaction_added",
     {"type": "event_callback", "event": {"type": "reaction_added", "user": "U0MAYA", "reaction": "eyes"}}),
    ("a slack message outside an event callback", "slack", "message", {"type": "app_rate_limited", "event": {"type": "message"}}),
]


@pytest.mark.parametrize("case, source, kind, payload", NOBODY, ids=[c[0] for c in NOBODY])
def test_a_delivery_addressed_to_nobody_reads_as_none(case, source, kind, payload):
    assert SOURCES[source].parse(kind, payload) is None


NOISE = [
    ("slack", d.slack_message("gone", subtype="message_deleted"), Ignored("slack_event_skipped", "a deleted post")),
    ("slack", d.slack_message("gone", hidden=True), Ignored("slack_event_skipped", "a deleted post")),
    ("slack", d.slack_message("joined", subtype="channel_join"), Ignored("slack_event_skipped", "a system post (channel_join)")),
    ("slack", d.slack_message("beep", user="", subtype="bot_message", bot_id="B1"), Ignored("slack_event_skipped", "a bot message")),
    ("mattermost", d.mattermost_post("joined", type="system_join_channel"),
     Ignored("mattermost_post_skipped", "a system post (system_join_channel)")),
    ("mattermost", d.mattermost_post("gone", delete_at=1718000000000), Ignored("mattermost_post_skipped", "a deleted post")),
    ("mattermost", d.mattermost_post("beep", user_name="", user_id=""), Ignored("mattermost_post_skipped", "a bot message")),
]


@pytest.mark.parametrize("source, payload, ignored", NOISE, ids=[n[2].why for n in NOISE])
def test_chat_noise_reads_as_ignored_with_its_reason(source, payload, ignored):
    kind = "posted" if source == "mattermost" else "message"
    assert SOURCES[source].parse(kind, payload) == ignored
    assert SOURCES[source].noise_log_event == ignored.log_event


def test_a_kept_slack_subtype_and_a_bot_message_with_a_user_are_read():
    shared = SOURCES["slack"].parse("message", d.slack_message("see file", subtype="file_share", ts="1718.100"))
    bot = SOURCES["slack"].parse("message", d.slack_message("from the bot user", subtype="bot_message", bot_id="B1", ts="1718.101"))
    assert isinstance(shared, Notification) and shared.salient_body == "see file"
    assert isinstance(bot, Notification) and bot.sender == "U0MAYA"


REFUSED = [
    ("github", "issue_comment", {**d.github_comment("x"), "repository": {}}, "repository.full_name: missing"),
    ("github", "issue_comment", {k: v for k, v in d.github_comment("x").items() if k != "issue"}, "issue: missing"),
    ("github", "pull_request", {k: v for k, v in d.github_pull_request("opened").items() if k != "pull_request"}, "pull_request: missing"),
    ("github", "pull_request", d.github_pull_request("opened", number="12"), "number: expected an integer, got '12'"),
    ("github", "pull_request", d.github_pull_request("opened", number=True), "number: expected an integer, got True"),
    ("github", "issue_comment", {k: v for k, v in d.github_comment("x").items() if k != "comment"}, "comment: missing"),
    ("github", "pull_request_review", {**d.github_pull_request("submitted")}, "review: missing"),
    ("gitlab", "note", {**d.gitlab_note("x"), "project": {"path_with_namespace": ""}}, "project.path_with_namespace: missing"),
    ("gitlab", "note", {k: v for k, v in d.gitlab_note("x").items() if k != "object_attributes"}, "object_attributes: missing"),
    ("gitlab", "note", {k: v for k, v in d.gitlab_note("x").items() if k != "merge_request"}, "merge_request: missing"),
    ("gitlab", "note", {**d.gitlab_note("x", merge_request=False), "issue": {"iid": "4"}}, "issue.iid: expected an integer, got '4'"),
    ("gitlab", "merge_request", {"project": {"path_with_namespace": "nimbus/web"}, "object_attributes": "open"},
     "object_attributes: missing"),
    ("gitlab", "issue", {"project": {"path_with_namespace": "nimbus/web"}, "object_attributes": {"action": "open"}},
     "iid: missing"),
    ("jira", "jira:issue_updated", {"webhookEvent": "jira:issue_updated"}, "issue: missing"),
    ("jira", "comment_created", {"webhookEvent": "comment_created", "issue": "POC-7"}, "issue: missing"),
    ("jira", "comment_created", d.jira_event(key="poc-7"), "issue.key: expected a key such as POC-7, got 'poc-7'"),
    ("jira", "comment_created", {"webhookEvent": "comment_created", "issue": {"fields": {}}}, "issue.key: expected a key such as POC-7, got ''"),
    ("slack", "message", d.slack_message("x", channel=""), "event.channel: missing"),
    ("slack", "message", {**d.slack_message("x"), "event": {**d.slack_message("x")["event"], "ts": ""}}, "event.ts: missing"),
    ("mattermost", "posted", d.mattermost_post("x", channel=""), "channel_id: missing"),
    ("mattermost", "posted", {**d.mattermost_post("x"), "post_id": ""}, "post_id: missing"),
]


@pytest.mark.parametrize("source, kind, payload, why", REFUSED, ids=[r[3] for r in REFUSED])
def test_a_malformed_delivery_is_refused_naming_the_field(source, kind, payload, why):
    with pytest.raises(ParseError) as refused:
        SOURCES[source].parse(kind, payload)
    assert refused.value.detail == why


# -- signatures ----------------------------------------------------------------------------------
NOW = 1_750_000_000
SIGNED_BODY = {
    "github": d.dumps(d.github_comment("@octo-alice please look")),
    "slack": d.dumps(d.slack_message("<@U0ALICE> please look")),
    "gitlab": d.dumps(d.gitlab_note("@alice-gl please look")),
    "jira": d.dumps(d.jira_event(text="[~accountid:acc-bob] please look")),
    "mattermost": d.dumps(d.mattermost_post("@alice-mm please look")),
}


def signed_headers(source: str, body: bytes, secret: str | None = None) -> dict:
    if source == "github":
        return d.github_headers(body, secret=secret)
    if source == "slack":
        return d.slack_headers(body, stamp=NOW, secret=secret)
    if source == "gitlab":
        return d.gitlab_headers(token=secret)
    if source == "jira":
        return d.jira_headers(body, secret=secret)
    return d.mattermost_headers()


def verify(source: str, headers: dict, body: bytes, secret: str | None = None) -> None:
    SOURCES[source].verify((secret or d.SECRETS[source]).encode(), headers, body, NOW)


@pytest.mark.parametrize("source", sorted(SIGNED_BODY))
def test_a_correctly_signed_delivery_passes_its_sources_check(source):
    body = SIGNED_BODY[source]
    assert verify(source, signed_headers(source, body), body) is None  # raises when refused


WRONG = {
    "github": "X-Hub-Signature-256: does not match the body signed with the integration's secret",
    "jira": "X-Hub-Signature: does not match the body signed with the integration's secret",
    "slack": "X-Slack-Signature: does not match the body signed with the integration's signing secret",
    "gitlab": "X-Gitlab-Token: does not match the integration's token",
    "mattermost": "token: does not match the integration's token",
}


@pytest.mark.parametrize("source", sorted(WRONG))
def test_a_delivery_signed_with_another_secret_is_refused_naming_the_header(source):
    body = SIGNED_BODY[source]
    with pytest.raises(SignatureError) as refused:
        verify(source, signed_headers(source, body), body, secret="another-secret-0123456789")
    assert refused.value.detail == WRONG[source]
    assert refused.value.header == WRONG[source].split(":")[0]


MISSING = {
    "github": "X-Hub-Signature-256: missing; the delivery must be signed with the integration's secret",
    "jira": "X-Hub-Signature: missing; the delivery must be signed with the integration's secret",
    "slack": "X-Slack-Signature: missing; the delivery must be signed with the signing secret",
    "gitlab": "X-Gitlab-Token: missing; the delivery must carry the integration's token",
    "mattermost": "token: missing; the delivery must carry the integration's token",
}


@pytest.mark.parametrize("source", sorted(MISSING))
def test_a_delivery_without_its_signature_is_refused_naming_the_header(source):
    body = SIGNED_BODY[source]
    headers = {k: v for k, v in signed_headers(source, body).items() if k not in MISSING[source].split(":")[0]}
    if source == "mattermost":
        body = d.dumps({k: v for k, v in d.mattermost_post("x").items() if k != "token"})
    with pytest.raises(SignatureError) as refused:
        verify(source, headers, body)
    assert refused.value.detail == MISSING[source]
    assert refused.value.header == MISSING[source].split(":")[0]


def test_a_signature_header_is_found_in_any_case_and_read_trimmed_and_a_changed_body_breaks_it():
    body = SIGNED_BODY["github"]
    headers = {k.lower(): v for k, v in d.github_headers(body).items()}
    headers["x-hub-signature-256"] = f" {headers['x-hub-signature-256']} "
    verify("github", headers, body)
    with pytest.raises(SignatureError) as refused:
        verify("github", headers, body + b" ")
    assert refused.value.header == "X-Hub-Signature-256"


@pytest.mark.parametrize("stamp, why", [
    ("", "missing; Slack signs every request with its timestamp"),
    ("17e8", "expected Unix seconds, got '17e8'"),
    ("abc", "expected Unix seconds, got 'abc'"),
    ("\u0661\u0667\u0665\u0660", "expected Unix seconds, got '\u0661\u0667\u0665\u0660'"),  # Arabic-Indic digits: isdigit, not ASCII
    ("1" * 13, f"expected Unix seconds, got '{'1' * 13}'"),
    ("9" * 40, f"expected Unix seconds, got '{'9' * 32}'"),
    ("1" * 12, "stale: older (or newer) than five minutes, refused as a replay"),  # twelve digits is a Unix time, if a far one
], ids=["missing", "exponent", "letters", "non-ascii digits", "thirteen digits", "forty digits", "twelve digits"])
def test_slacks_timestamp_is_checked_before_its_signature_and_refused_naming_its_header(stamp, why):
    body = SIGNED_BODY["slack"]
    headers = {**d.slack_headers(body, stamp=NOW), "X-Slack-Request-Timestamp": stamp}
    with pytest.raises(SignatureError) as refused:
        verify("slack", headers, body)
    assert refused.value.detail == f"X-Slack-Request-Timestamp: {why}"


def test_slack_signs_the_timestamp_with_the_body():
    body = SIGNED_BODY["slack"]
    headers = {**d.slack_headers(body, stamp=NOW), "X-Slack-Request-Timestamp": str(NOW + 1)}
    with pytest.raises(SignatureError) as refused:
        verify("slack", headers, body)
    assert refused.value.header == "X-Slack-Signature"


# -- Mattermost's token rides the body ----------------------------------------------------------
def test_a_mattermost_form_is_read_like_json_and_its_token_checked_as_a_field():
    secret = d.SECRETS["mattermost"]
    form = f"token={secret}&channel_id=ch1&post_id=p9&user_name=maya-mm&text=hi+%40alice-mm&text=last+wins".encode()
    assert token_candidates(FORM, form) == [secret]
    verify("mattermost", FORM, form)
    payload = SOURCES["mattermost"].decode(FORM, form)
    assert payload["text"] == "last wins" and payload["token"] == secret
    assert SOURCES["mattermost"].decode(FORM, form + b"&trigger_word=")["trigger_word"] == ""  # a blank field is kept
    assert SOURCES["mattermost"].scrubbed(FORM, form, payload) == b"channel_id=ch1&post_id=p9&user_name=maya-mm&text=hi+%40alice-mm&text=last+wins"
    json_body = d.dumps(d.mattermost_post("hi", post_id="p10"))
    scrubbed = SOURCES["mattermost"].scrubbed({}, json_body, SOURCES["mattermost"].decode({}, json_body))
    assert b"token" not in scrubbed and secret.encode() not in scrubbed and b'"post_id": "p10"' in scrubbed


def test_a_mattermost_token_found_only_inside_another_field_does_not_pass():
    secret = d.SECRETS["mattermost"]
    nested = d.dumps({**d.mattermost_post("x"), "token": "wrong", "props": {"token": secret}})
    assert token_candidates({}, nested) == ["wrong", secret]
    with pytest.raises(SignatureError) as refused:
        verify("mattermost", {}, nested)
    assert refused.value.detail == "token: does not match the integration's token"
    only_nested = d.dumps({**{k: v for k, v in d.mattermost_post("x").items() if k != "token"}, "props": {"token": secret}})
    with pytest.raises(SignatureError) as refused:
        verify("mattermost", {}, only_nested)
    assert refused.value.detail == "token: missing; the delivery must carry the integration's token"
    form = f"token=wrong&text=see+x%26token%3D{secret}&note=a&token2={secret}".encode()
    assert token_candidates(FORM, form) == ["wrong"]  # a 'token=' not at a field's start is not the field


def test_the_token_scan_is_bounded():
    secret = d.SECRETS["mattermost"]
    many = b"&".join([b"token=x"] * MAX_CANDIDATES + [f"token={secret}".encode()])
    assert token_candidates(FORM, many) == ["x"] * MAX_CANDIDATES
    json_many = b"{" + b",".join(b'"token": "x"' for _ in range(MAX_CANDIDATES)) + b', "token": "' + secret.encode() + b'"}'
    assert token_candidates({}, json_many) == ["x"] * MAX_CANDIDATES
    long_value = b"token=" + b"a" * 1025
    assert token_candidates(FORM, long_value) == []
    assert token_candidates(FORM, b"token=" + b"a" * 1024) == ["a" * 1024]
    assert token_candidates(FORM, b"token=" + b"a" * 1024 + b"&text=hi") == ["a" * 1024]
    assert token_candidates({}, b'{"token": 7, "token": "\\q", "token": "ok"}') == ["ok"]


@pytest.mark.parametrize("body, why", [
    (b"a=1&" * MAX_FORM_FIELDS + b"b=2", f"body: a form of more than {MAX_FORM_FIELDS} fields is not an outgoing webhook's"),
    (b"\xff\xfe", "body: not a form ('utf-8' codec can't decode byte 0xff in position 0: invalid start byte)"),
    (b"justtext", "body: not a form (bad query field: 'justtext')"),
], ids=["too many fields", "not utf-8", "not a form"])
def test_a_mattermost_form_that_cannot_be_read_is_refused_naming_why(body, why):
    with pytest.raises(PayloadError) as refused:
        SOURCES["mattermost"].decode(FORM, body)
    assert refused.value.detail == why


@pytest.mark.parametrize("body, why", [
    (b"{not json", "body: not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    (b"[1]", "body: expected a JSON object, got list"),
    (b"[" * 100_000 + b"]" * 100_000, "body: JSON nested too deep to read (a delivery nests a few levels)"),
], ids=["not json", "not an object", "too deep"])
def test_a_json_body_that_cannot_be_read_is_refused_naming_why(body, why):
    with pytest.raises(PayloadError) as refused:
        SOURCES["github"].decode({}, body)
    assert refused.value.detail == why


# -- ids, kinds, the challenge and the digest ----------------------------------------------------
def test_a_delivery_id_is_the_vendors_or_else_a_digest_of_the_body():
    body = b'{"hello": "world"}'
    digest = "sha256-" + hashlib.sha256(body).hexdigest()[:32]
    assert len(digest) == 39
    assert SOURCES["github"].delivery_id({"x-github-delivery": "g-1"}, {}, body) == "g-1"
    assert SOURCES["gitlab"].delivery_id({"X-Gitlab-Event-UUID": "l-1"}, {}, body) == "l-1"
    assert SOURCES["jira"].delivery_id({"X-Atlassian-Webhook-Identifier": "j-1"}, {}, body) == "j-1"
    assert SOURCES["slack"].delivery_id({}, {"event_id": "Ev1"}, body) == "Ev1"
    assert SOURCES["mattermost"].delivery_id({}, {"post_id": "p1"}, body) == "p1"
    for source in SOURCES.values():
        assert source.delivery_id({}, {}, body) == digest, source.name


def test_the_event_kind_each_source_reads():
    assert SOURCES["github"].event_kind({"X-GitHub-Event": "pull_request"}, {}) == "pull_request"
    assert SOURCES["github"].event_kind({}, {}) == "unknown"
    assert SOURCES["gitlab"].event_kind({"X-Gitlab-Event": "Note Hook"}, {"object_kind": "note"}) == "note"
    assert SOURCES["gitlab"].event_kind({"X-Gitlab-Event": "Note Hook"}, {"event_type": "work_item"}) == "work_item"
    assert SOURCES["gitlab"].event_kind({"X-Gitlab-Event": "Note Hook"}, {}) == "Note Hook"
    assert SOURCES["gitlab"].event_kind({}, []) == "unknown"
    assert SOURCES["jira"].event_kind({}, {"webhookEvent": "jira:issue_created"}) == "jira:issue_created"
    assert SOURCES["jira"].event_kind({}, {}) == SOURCES["jira"].event_kind({}, []) == "unknown"
    assert SOURCES["slack"].event_kind({}, d.slack_message("x")) == "message"
    assert SOURCES["slack"].event_kind({}, {"type": "event_callback", "event": {}}) == "unknown"
    assert SOURCES["slack"].event_kind({}, {"type": "url_verification"}) == "url_verification"
    assert SOURCES["slack"].event_kind({}, {"type": "event_callback", "event": "message"}) == "event_callback"
    assert SOURCES["slack"].event_kind({}, {}) == "unknown"
    assert SOURCES["mattermost"].event_kind({}, {}) == "posted"


def test_slack_answers_its_url_challenge_and_no_other_source_has_one():
    assert SOURCES["slack"].challenge({"type": "url_verification", "challenge": "abc"}) == {"challenge": "abc"}
    assert SOURCES["slack"].challenge({"type": "url_verification"}) == {"challenge": ""}
    assert SOURCES["slack"].challenge(d.slack_message("x")) is None
    assert all(SOURCES[name].challenge({"type": "url_verification", "challenge": "abc"}) is None for name in SOURCES if name != "slack")


@pytest.mark.parametrize("source", ["github", "gitlab"])
def test_a_code_hosts_lifecycle_event_collapses_to_its_lead_in_a_digest_and_a_comment_keeps_its_text(source):
    digest = SOURCES[source].digest_body
    assert digest({"salient_body": "the description", "metadata": {"lifecycle": True, "lead": "maya closed it"}}) == "maya closed it"
    assert digest({"salient_body": "the description", "metadata": {"lifecycle": True}}) == "the description"
    assert digest({"metadata": {"lifecycle": True}}) == ""
    assert digest({"salient_body": "the comment", "metadata": {"lifecycle": False, "lead": "maya commented"}}) == "the comment"
    assert digest({"salient_body": "", "metadata": {"lead": "maya commented"}, "lead": "the lead"}) == "the lead"
    assert digest({}) == ""


def test_a_jira_issue_update_collapses_to_its_lead_in_a_digest_and_a_creation_or_comment_keeps_its_text():
    digest = SOURCES["jira"].digest_body
    updated = {"event_kind": "jira:issue_updated", "lifecycle": True, "lead": "maya updated POC-7"}
    assert digest({"salient_body": "a stale description", "metadata": updated}) == "maya updated POC-7"
    assert digest({"salient_body": "a stale description", "metadata": {**updated, "lead": ""}}) == ""
    created = {"event_kind": "jira:issue_created", "lifecycle": True, "lead": "maya created POC-7"}
    assert digest({"salient_body": "the description", "metadata": created}) == "the description"
    comment = {"event_kind": "comment_created", "lifecycle": False, "lead": "maya commented on POC-7"}
    assert digest({"salient_body": "the comment", "metadata": comment}) == "the comment"
    assert digest({"salient_body": "the comment", "metadata": {**updated, "lifecycle": False}}) == "the comment"


def test_a_chat_message_keeps_its_text_in_a_digest():
    for source in ("slack", "mattermost"):
        assert SOURCES[source].digest_body({"salient_body": "hi", "metadata": {"lifecycle": True, "lead": "x"}}) == "hi"
        assert SOURCES[source].digest_body({"lead": "x"}) == "x"
