"""Slack's replay window is two-sided (Slack's Events API: a request whose
X-Slack-Request-Timestamp is more than five minutes from now is refused as a replay). A stamp
from the future is as much a replay as a stale one: accepting one would let a captured
request signed with a future stamp be sent again and again until that stamp came round."""
from __future__ import annotations

import pytest

from notify.sources.base import SignatureError
from notify.sources.slack import Slack
from tests.notify import deliveries as d

NOW = 1_750_000_000
BODY = d.dumps(d.slack_message("<@U0ALICE> hello"))
SECRET = d.SECRETS["slack"].encode()


@pytest.mark.parametrize("offset", [-300, 0, 300])
def test_a_stamp_within_five_minutes_either_side_of_now_is_accepted(offset):
    assert Slack().verify(SECRET, d.slack_headers(BODY, stamp=NOW + offset), BODY, now=NOW) is None  # raises when refused


@pytest.mark.parametrize("offset", [-301, 301, 86_400])
def test_a_stamp_more_than_five_minutes_before_or_after_now_is_refused_as_a_replay(offset):
    with pytest.raises(SignatureError) as refused:
        Slack().verify(SECRET, d.slack_headers(BODY, stamp=NOW + offset), BODY, now=NOW)
    assert refused.value.header == "X-Slack-Request-Timestamp"
    assert "refused as a replay" in str(refused.value)
