"""Every drop of a delivery addressed to somebody is a notification_skipped whose reason is one of
seed 000's fixed phrases ("Distributed Tracing"), with the particular in `detail`."""
from __future__ import annotations

import pytest

from engine.config import parse_company
from events.envelope import new
from events.tracing import trace_of
from events.types.wakes import RawWebhook
from notify import skips
from tests.notify import deliveries as d

pytestmark = pytest.mark.timeout(30)


def test_the_skip_reasons_are_the_seeds_seven_phrases():
    assert skips.REASONS == {
        "its payload cannot be read",
        "its source was disconnected",
        "nothing parses its source",
        "its parser refuses the payload",
        "no seat matches its recipient",
        "the routing gate refuses it",
        "the rate valve is shut",
    }


def test_a_reason_outside_the_set_is_refused():
    with pytest.raises(skips.UnknownReason):
        skips.skip_event("it felt wrong", "", trace_of(), source="github", about="x")


def raw(integration: str, body: bytes, event_kind: str = "issue_comment", headers: dict | None = None):
    return new(RawWebhook(integration=integration, event_kind=event_kind, delivery_id="d-1", raw_body=body.decode(),
                          headers=headers or {}), trace_of(), source=integration)


async def test_each_reason_is_what_the_service_records_for_its_case(node, service):
    seen = {}

    async def reason_of(event, setup=None):
        before = len(node.skips())
        if setup:
            setup()
        await service.route(event)
        new_skips = node.skips()[before:]
        assert len(new_skips) == 1, new_skips
        return new_skips[0]

    seen["unreadable"] = await reason_of(raw("github", b"{not json"))
    seen["no parser"] = await reason_of(raw("confluence", b"{}"))
    seen["refused"] = await reason_of(raw("github", d.dumps({"action": "created", "repository": {"full_name": "a/b"}})))
    seen["no seat"] = await reason_of(raw("github", d.dumps(d.github_comment("@stranger hi", pr_author="x"))))
    seen["gate"] = await reason_of(raw("github", d.dumps(d.github_comment("@octo-maya hi", author="octo-bob", pr_author="x"))))
    company = node.company
    seen["disconnected"] = await reason_of(raw("github", d.dumps(d.github_comment("@octo-alice"))), setup=lambda: setattr(
        node, "company", parse_company(d.company_yaml(integrations=""), env=d.ENV)))
    node.company = parse_company(d.company_yaml(extra="notification_rate_limit: 1\n"), env=d.ENV)
    service.valve.clock = lambda: 1_700_000_000.0  # both in one second
    await service.route(raw("github", d.dumps(d.github_comment("@octo-alice hi", pr_author="x"))))
    seen["valve"] = await reason_of(raw("github", d.dumps(d.github_comment("@octo-alice again", pr_author="x"))))
    node.company = company
    reasons = {name: s.data.reason for name, s in seen.items()}
    assert reasons == {
        "unreadable": skips.PAYLOAD_UNREADABLE, "no parser": skips.NO_PARSER, "refused": skips.PARSER_REFUSED,
        "no seat": skips.NO_SEAT, "gate": skips.GATE_REFUSED, "disconnected": skips.SOURCE_DISCONNECTED,
        "valve": skips.RATE_VALVE_SHUT,
    }
    assert seen["refused"].data.detail == "issue: missing"  # the parser's own words
    assert "not JSON" in seen["unreadable"].data.detail
    assert all(s.data.reason in skips.REASONS for s in node.skips())
