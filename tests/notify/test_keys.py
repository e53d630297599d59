"""Partition keys and conversation identities, every case seed 000 names ("Inbox Batching &
Coalescing"): Jira on the issue, GitHub on repo#number, GitLab `project!iid` / `project#iid`,
Slack and Mattermost on channel + thread root, a top-level DM or group DM on the whole channel,
a DM thread reply on its thread, and the identity of any DM the bare channel."""
from __future__ import annotations

import pytest

from notify.sources import SOURCES
from notify.sources.base import Notification
from tests.notify import deliveries as d

CASES = [
    # (case, source, event kind, payload, partition key, conversation identity)
    ("jira comment keys on the issue", "jira", "comment_created", d.jira_event("comment_created", key="POC-7"),
     "jira:POC-7", "jira:POC-7"),
    ("jira issue_updated keys on the issue", "jira", "jira:issue_updated", d.jira_event("jira:issue_updated", key="POC-7"),
     "jira:POC-7", "jira:POC-7"),
    ("github PR comment keys on repo#number", "github", "issue_comment", d.github_comment("hi", repo="nimbus/api", number=12),
     "github:nimbus/api#12", "github:nimbus/api#12"),
    ("github issue comment keys on repo#number", "github", "issue_comment",
     d.github_comment("hi", repo="nimbus/api", number=3, pr=False), "github:nimbus/api#3", "github:nimbus/api#3"),
    ("github PR lifecycle keys on repo#number", "github", "pull_request", d.github_pull_request("closed", number=12),
     "github:nimbus/api#12", "github:nimbus/api#12"),
    ("gitlab MR note keys on project!iid", "gitlab", "note", d.gitlab_note("hi", project="nimbus/web", iid=4),
     "gitlab:nimbus/web!4", "gitlab:nimbus/web!4"),
    ("gitlab issue note keys on project#iid", "gitlab", "note",
     d.gitlab_note("hi", project="nimbus/web", iid=4, merge_request=False), "gitlab:nimbus/web#4", "gitlab:nimbus/web#4"),
    ("gitlab MR hook keys on project!iid", "gitlab", "merge_request",
     {"object_kind": "merge_request", "user": {"username": "maya-gl"}, "project": {"path_with_namespace": "nimbus/web"},
      "object_attributes": {"iid": 9, "action": "open", "title": "t"}}, "gitlab:nimbus/web!9", "gitlab:nimbus/web!9"),
    ("gitlab issue hook keys on project#iid", "gitlab", "issue",
     {"object_kind": "issue", "user": {"username": "maya-gl"}, "project": {"path_with_namespace": "nimbus/web"},
      "object_attributes": {"iid": 9, "action": "close", "title": "t"}}, "gitlab:nimbus/web#9", "gitlab:nimbus/web#9"),
    ("slack top-level channel message keys on its own ts", "slack", "message",
     d.slack_message("<@U0ALICE> ask", channel="C9", ts="1718.001"), "slack:C9:1718.001", "slack:C9:1718.001"),
    ("slack channel thread reply keys on its root", "slack", "message",
     d.slack_message("reply", channel="C9", ts="1718.002", thread_ts="1718.001"), "slack:C9:1718.001", "slack:C9:1718.001"),
    ("slack thread root carrying thread_ts keys on itself", "slack", "message",
     d.slack_message("root", channel="C9", ts="1718.001", thread_ts="1718.001"), "slack:C9:1718.001", "slack:C9:1718.001"),
    ("slack app_mention without channel_type keys on channel + ts", "slack", "app_mention",
     {**d.slack_message("<@U0ALICE>", channel="C9", ts="1718.003", channel_type=None),
      "event": {"type": "app_mention", "channel": "C9", "user": "U0MAYA", "text": "<@U0ALICE>", "ts": "1718.003"}},
     "slack:C9:1718.003", "slack:C9:1718.003"),
    ("slack private channel (group) is not a DM", "slack", "message",
     d.slack_message("x", channel="G2", ts="1718.004", channel_type="group"), "slack:G2:1718.004", "slack:G2:1718.004"),
    ("slack top-level DM keys on the whole channel", "slack", "message",
     d.slack_message("x", channel="D1", ts="1718.001", channel_type="im"), "slack:D1", "slack:D1"),
    ("slack top-level group DM keys on the whole channel", "slack", "message",
     d.slack_message("x", channel="G7", ts="1718.001", channel_type="mpim"), "slack:G7", "slack:G7"),
    ("slack D-prefixed channel without channel_type is a DM", "slack", "message",
     d.slack_message("x", channel="D1", ts="1718.005", channel_type=None), "slack:D1", "slack:D1"),
    ("slack DM thread reply keeps its thread, identity the bare channel", "slack", "message",
     d.slack_message("x", channel="D1", ts="1718.009", thread_ts="1718.001", channel_type="im"),
     "slack:D1:1718.001", "slack:D1"),
    ("mattermost top-level post keys on its own id", "mattermost", "posted",
     d.mattermost_post("x", channel="ch1", post_id="p1"), "mattermost:ch1:p1", "mattermost:ch1:p1"),
    ("mattermost thread reply keys on its root", "mattermost", "posted",
     d.mattermost_post("x", channel="ch1", post_id="p2", root_id="p1"), "mattermost:ch1:p1", "mattermost:ch1:p1"),
    ("mattermost top-level DM keys on the whole channel", "mattermost", "posted",
     d.mattermost_post("x", channel="dm1", post_id="p3", channel_type="D"), "mattermost:dm1", "mattermost:dm1"),
    ("mattermost DM named a__b is a DM", "mattermost", "posted",
     d.mattermost_post("x", channel="dm2", post_id="p4", channel_name=f"{'a' * 26}__{'b' * 26}"), "mattermost:dm2", "mattermost:dm2"),
    ("mattermost DM thread reply keeps its thread", "mattermost", "posted",
     d.mattermost_post("x", channel="dm1", post_id="p5", root_id="p3", channel_type="D"), "mattermost:dm1:p3", "mattermost:dm1"),
]


@pytest.mark.parametrize("case, source, kind, payload, partition, identity", CASES, ids=[c[0] for c in CASES])
def test_partition_key_and_conversation_identity(case, source, kind, payload, partition, identity):
    parsed = SOURCES[source].parse(kind, payload)
    assert isinstance(parsed, Notification), parsed
    assert (parsed.partition_key, parsed.conversation_identity) == (partition, identity)
    # The rule the seed states: a partition key is the identity or a finer cut of it.
    assert parsed.partition_key == parsed.conversation_identity or parsed.partition_key.startswith(parsed.conversation_identity + ":")


def test_four_top_level_dm_messages_share_one_partition_and_two_channel_asks_do_not():
    slack = SOURCES["slack"]
    dms = [slack.parse("message", d.slack_message(f"m{i}", channel="D1", channel_type="im")) for i in range(4)]
    assert {n.partition_key for n in dms} == {"slack:D1"}
    asks = [slack.parse("message", d.slack_message(f"<@U0ALICE> ask {i}", channel="C9")) for i in range(2)]
    assert len({n.partition_key for n in asks}) == 2
