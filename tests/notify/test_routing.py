"""The notification service routes a delivery through the CURRENT company's org (seed 000,
"Routing"): the users map names a seat or a role, an agent gets a wake on its inbox carrying the
partition key, the conversation identity and the delivery's trace, a human gets an info-level
skip, a name no seat matches is a skip, and an agent's own post and chat noise are debug lines."""
from __future__ import annotations

import logging

import pytest

from engine.config import parse_company
from engine.queue import topics
from notify import skips
from notify.service import NotificationService
from tests.notify import deliveries as d
from tests.queue.waiting import eventually

pytestmark = pytest.mark.timeout(30)


async def route(node, service, source: str, headers: dict, body: bytes):
    answer = await node.deliver(source, headers, body)
    assert answer.status == 202, answer
    return await service.route(node.raw())


async def test_a_mention_wakes_the_mapped_agent_with_its_keys_and_the_delivery_trace(node, service):
    body = d.dumps(d.github_comment("@octo-alice can you rerun this?", author="octo-maya", pr_author="octo-bob"))
    routed = await route(node, service, "github", d.github_headers(body), body)
    assert sorted(routed.wakes) == ["alice", "bob"]  # alice mentioned; bob owns the pull request
    [wake] = node.wakes("alice")
    assert wake.type == "external_notification"
    assert wake.get("partition_key") == "github:nimbus/api#12"
    assert wake.data.conversation_identity == "github:nimbus/api#12"
    assert wake.data.direct and not wake.data.recon
    assert wake.data.sender == "octo-maya" and "can you rerun this?" in wake.data.salient_body
    assert wake.data.agent_id == str(node.company.agent_id_for("alice"))
    [bob] = node.wakes("bob")
    assert bob.data.recon and not bob.data.direct  # the author is told, not asked
    [record] = node.events("inbound_delivery")
    raw = node.raw()
    assert wake.trace_id == raw.trace_id == record.trace_id
    assert wake.parent_span_id == raw.span_id  # notify.route, the wake's span, hangs under webhook.receive
    assert wake.span_id != raw.span_id


async def test_a_handle_or_a_role_named_directly_reaches_its_seats(node, service):
    body = d.dumps(d.github_comment("@pm what is the priority?", pr_author="nobody-external"))
    routed = await route(node, service, "github", d.github_headers(body), body)
    assert routed.wakes == ["carol"]
    body = d.dumps(d.github_comment("@engineer anyone free?", pr_author="nobody-external"))
    routed = await route(node, service, "github", d.github_headers(body), body)
    assert sorted(routed.wakes) == ["alice", "bob"]  # a role names every seat holding it


async def test_a_human_recipient_is_an_info_level_skip_never_a_wake(node, service):
    body = d.dumps(d.github_comment("@octo-maya please decide", author="octo-bob", pr_author="nobody-external"))
    routed = await route(node, service, "github", d.github_headers(body), body)
    assert routed.wakes == [] and routed.skips == [skips.GATE_REFUSED]
    [skip] = node.skips()
    assert skip.data.agent_handle == "maya" and skip.data.recipient == "octo-maya"
    assert skip.payload["level"] == "info" and "human seat" in skip.data.detail
    assert node.wakes() == []


async def test_a_name_no_seat_matches_is_a_skip_naming_the_recipient(node, service):
    body = d.dumps(d.github_comment("@stranger thoughts?", author="octo-bob", pr_author="nobody-external"))
    routed = await route(node, service, "github", d.github_headers(body), body)
    assert routed.skips == [skips.NO_SEAT]
    [skip] = node.skips()
    assert skip.data.recipient == "stranger" and "integrations.github.users" in skip.data.detail
    assert skip.trace_id == node.raw().trace_id


async def test_an_agents_own_post_is_a_debug_line_not_a_record(node, service, caplog):
    body = d.dumps(d.github_comment("I pushed a fix", author="octo-alice", pr_author="octo-alice"))
    with caplog.at_level(logging.DEBUG, logger="notify.service"):
        routed = await route(node, service, "github", d.github_headers(body), body)
    assert routed.wakes == [] and routed.skips == [] and routed.noise == ["alice's own post"]
    assert node.skips() == [] and node.wakes() == []
    assert any(r.getMessage() == "github_event_skipped" and r.levelno == logging.DEBUG for r in caplog.records)


async def test_a_slack_dm_reaches_the_app_user_it_was_delivered_for(node, service):
    body = d.dumps(d.slack_message("are you there?", channel="D1", channel_type="im", user="U0MAYA", app_user="U0BOB"))
    routed = await route(node, service, "slack", d.slack_headers(body), body)
    assert routed.wakes == ["bob"]
    [wake] = node.wakes("bob")
    assert wake.get("partition_key") == "slack:D1" and wake.data.conversation_identity == "slack:D1"
    assert wake.data.direct


async def test_slack_chat_noise_is_logged_at_debug_and_never_recorded(node, service, caplog):
    noise = [
        d.slack_message("<@U0ALICE> bot says", user="", bot_id="B1"),
        d.slack_message("<@U0ALICE> joined", subtype="channel_join"),
        d.slack_message("gone", subtype="message_deleted"),
        d.slack_message("<@U0ALICE> I said", user="U0ALICE"),  # the agent's own post
    ]
    with caplog.at_level(logging.DEBUG, logger="notify.service"):
        for payload in noise:
            body = d.dumps(payload)
            await route(node, service, "slack", d.slack_headers(body), body)
    assert node.skips() == [] and node.wakes() == []
    assert sum(r.getMessage() == "slack_event_skipped" for r in caplog.records) == len(noise)


async def test_a_thread_reply_reaches_the_seats_that_follow_the_thread(node, service, caplog):
    root = d.slack_message("<@U0ALICE> can you look at the deploy?", channel="C9", ts="1718.100")
    body = d.dumps(root)
    await route(node, service, "slack", d.slack_headers(body), body)
    reply = d.dumps(d.slack_message("also the logs are in #ops", channel="C9", ts="1718.101", thread_ts="1718.100"))
    routed = await route(node, service, "slack", d.slack_headers(reply), reply)
    assert routed.wakes == ["alice"]
    assert [w.get("partition_key") for w in node.wakes("alice")] == ["slack:C9:1718.100"] * 2
    with caplog.at_level(logging.DEBUG, logger="notify.service"):
        other = d.dumps(d.slack_message("unrelated reply", channel="C9", ts="1718.201", thread_ts="1718.200"))
        routed = await route(node, service, "slack", d.slack_headers(other), other)
    assert routed.noise == ["a thread reply no seat follows"] and node.skips() == []


async def test_one_slack_message_delivered_as_message_and_app_mention_wakes_once(node, service):
    message = d.slack_message("<@U0ALICE> ping", channel="C9", ts="1718.300")
    mention = {**message, "event_id": "EvOther", "event": {**message["event"], "type": "app_mention"}}
    for payload in (message, mention):
        body = d.dumps(payload)
        await route(node, service, "slack", d.slack_headers(body), body)
    inbox = await node.queue.pending(topics.agent_inbox("alice"), topics.inbox_group("alice"))
    assert inbox == 1


async def test_the_rate_valve_drops_past_the_limit_per_seat_per_second(node, service):
    node.company = parse_company(d.company_yaml(extra="notification_rate_limit: 2\n"), env=d.ENV)
    clock = [1_700_000_000.2]
    service.valve.clock = lambda: clock[0]
    routed = []
    for i in range(4):
        body = d.dumps(d.github_comment(f"@octo-alice ping {i}", pr_author="nobody-external"))
        routed.append(await route(node, service, "github", d.github_headers(body), body))
    assert [r.skips for r in routed] == [[], [], [skips.RATE_VALVE_SHUT], [skips.RATE_VALVE_SHUT]]
    assert len(node.wakes("alice")) == 2
    assert all(s.data.detail == "over notification_rate_limit (2 per seat per second)" for s in node.skips())
    clock[0] += 1  # the next second opens the valve again
    body = d.dumps(d.github_comment("@octo-alice later", pr_author="nobody-external"))
    assert (await route(node, service, "github", d.github_headers(body), body)).wakes == ["alice"]


async def test_a_source_the_active_revision_dropped_is_a_disconnected_skip(node, service):
    body = d.dumps(d.github_comment("@octo-alice hi"))
    answer = await node.deliver("github", d.github_headers(body), body)
    assert answer.status == 202
    node.company = parse_company(d.company_yaml(integrations="integrations:\n  slack:\n    signing_secret: x\n"), env=d.ENV)
    routed = await service.route(node.raw())
    assert routed.skips == [skips.SOURCE_DISCONNECTED]
    assert node.skips()[0].data.detail == "integrations.github is not in the active revision"


async def test_a_mattermost_outgoing_webhook_posted_as_a_form_is_read_like_json(node, service):
    from urllib.parse import urlencode

    body = urlencode(d.mattermost_post("@alice-mm can you check the deploy?", channel="ch7", post_id="p70")).encode()
    routed = await route(node, service, "mattermost", {"Content-Type": "application/x-www-form-urlencoded"}, body)
    assert routed.wakes == ["alice"]
    [wake] = node.wakes("alice")
    assert wake.get("partition_key") == "mattermost:ch7:p70" and wake.data.sender == "maya-mm"


async def test_a_gitlab_commit_note_keys_on_its_own_event(node, service):
    payload = d.gitlab_note("@alice-gl see this commit")
    payload["object_attributes"]["noteable_type"] = "Commit"
    body = d.dumps(payload)
    await route(node, service, "gitlab", d.gitlab_headers(), body)
    [wake] = node.wakes("alice")
    assert wake.get("partition_key") == f"event:{wake.id}" == wake.data.conversation_identity


async def test_a_redelivered_delivery_republishes_the_same_wake_and_skip_ids(node, service):
    body = d.dumps(d.github_comment("@octo-alice @stranger look", pr_author="nobody-external"))
    await route(node, service, "github", d.github_headers(body), body)
    await service.route(node.raw())
    skipped = node.skips()
    assert len(skipped) == 2 and skipped[0].id == skipped[1].id  # the store keeps one row
    inbox = await node.queue.pending(topics.agent_inbox("alice"), topics.inbox_group("alice"))
    assert inbox == 1  # the broker's dedupe window collapsed the second wake


async def test_a_delivery_accepted_before_the_service_attaches_waits_for_it(node):
    body = d.dumps(d.github_comment("@octo-alice early bird", pr_author="nobody-external"))
    assert (await node.deliver("github", d.github_headers(body), body)).status == 202
    service = NotificationService(node)  # attaches only now, as on a node that just began serving
    await service.start()
    try:
        inbox = (topics.agent_inbox("alice"), topics.inbox_group("alice"))
        await eventually(lambda: node.queue.pending(*inbox), message="the wake on alice's inbox")
        assert [w.data.salient_body for w in node.wakes("alice")] == ["@octo-alice early bird"]
    finally:
        await service.stop(False)
