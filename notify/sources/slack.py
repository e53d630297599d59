"""Slack's Events API: a v0 signature over `v0:<timestamp>:<body>` under the signing secret, the
timestamp inside five minutes, the `url_verification` challenge answered, `event_id` as the
delivery id (seed 000, "Inbox Batching & Coalescing": Slack keys on channel + thread root, a
top-level DM or group DM on the whole channel; "Distributed Tracing": a chat parser's own
filtering is logged as `slack_event_skipped`, never recorded).

Who a message reaches: the users it @-mentions (`<@U123>`) and, in a DM, the app user the event
was delivered for (`authorizations`), through `integrations.slack.users` (user id -> seat
handle or role). A thread reply that mentions nobody reaches the seats that follow the thread.
"""
from __future__ import annotations

import hmac
import re
from typing import Any, Mapping

from notify.sources.base import (
    Address,
    BaseSource,
    Ignored,
    Notification,
    ParseError,
    SignatureError,
    body_digest,
    header,
    hmac_hex,
    render,
)
from notify.sources.chat import chat_keys

TIMESTAMP_WINDOW_SECONDS = 5 * 60  # Slack's own replay window for a signed request
MAX_TIMESTAMP_DIGITS = 12          # Unix seconds until the year 33658
MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")
MESSAGE_KINDS = {"message", "app_mention"}
KEPT_SUBTYPES = {None, "", "file_share", "thread_broadcast", "me_message"}
LOG_EVENT = "slack_event_skipped"


class Slack(BaseSource):
    name = "slack"
    secret_field = "signing_secret"
    signature_header = "X-Slack-Signature"
    timestamp_header = "X-Slack-Request-Timestamp"
    noise_log_event = LOG_EVENT
    kept_headers = ("X-Slack-Request-Timestamp", "X-Slack-Retry-Num", "X-Slack-Retry-Reason", "User-Agent", "Content-Type")

    def verify(self, secret: bytes, headers: Mapping[str, str], body: bytes, now: float) -> None:
        stamp = header(headers, self.timestamp_header)
        if not stamp:
            raise SignatureError(self.timestamp_header, "missing; Slack signs every request with its timestamp")
        # Digits only, and no more than a Unix time has for the next few millennia: a 400-digit
        # number would overflow the comparison with the clock.
        if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= MAX_TIMESTAMP_DIGITS):
            raise SignatureError(self.timestamp_header, f"expected Unix seconds, got {stamp[:32]!r}")
        when = int(stamp)
        if abs(now - when) > TIMESTAMP_WINDOW_SECONDS:
            raise SignatureError(self.timestamp_header, "stale: older (or newer) than five minutes, refused as a replay")
        given = header(headers, self.signature_header)
        if not given:
            raise SignatureError(self.signature_header, "missing; the delivery must be signed with the signing secret")
        expected = "v0=" + hmac_hex(secret, b"v0:" + stamp.encode() + b":" + body)
        if not hmac.compare_digest(expected.encode(), given.strip().encode()):
            raise SignatureError(self.signature_header, "does not match the body signed with the integration's signing secret")

    def delivery_id(self, headers: Mapping[str, str], payload: Any, body: bytes) -> str:
        return str(payload.get("event_id") or "") or body_digest(body)

    def event_kind(self, headers: Mapping[str, str], payload: Any) -> str:
        if payload.get("type") == "event_callback" and isinstance(payload.get("event"), Mapping):
            return str(payload["event"].get("type") or "unknown")
        return str(payload.get("type") or "unknown")

    def challenge(self, payload: Any) -> dict | None:
        if payload.get("type") == "url_verification":
            return {"challenge": str(payload.get("challenge") or "")}
        return None

    def parse(self, event_kind: str, payload: Any) -> Notification | Ignored | None:
        if payload.get("type") != "event_callback" or event_kind not in MESSAGE_KINDS:
            return None  # a reaction, a rate-limit notice: addressed to nobody
        event = payload.get("event")
        subtype = event.get("subtype")
        if subtype == "message_deleted" or event.get("hidden"):
            return Ignored(LOG_EVENT, "a deleted post")
        if subtype not in KEPT_SUBTYPES and subtype != "bot_message":
            return Ignored(LOG_EVENT, f"a system post ({subtype})")
        sender = str(event.get("user") or "")
        if event.get("bot_id") and not sender:
            return Ignored(LOG_EVENT, "a bot message")
        channel, ts = str(event.get("channel") or ""), str(event.get("ts") or "")
        if not channel or not ts:
            raise ParseError(f"event.{'channel' if not channel else 'ts'}: missing")
        root = str(event.get("thread_ts") or "")
        direct = is_direct(channel, event.get("channel_type"))
        partition, identity = chat_keys("slack", channel, ts, root, direct)
        reply = bool(root) and root != ts
        text = str(event.get("text") or "")
        addresses = [Address(u, "mention") for u in dict.fromkeys(MENTION.findall(text))]
        if direct:
            addresses += [Address(u, "dm") for u in app_users(payload) if u != sender]
        where = "a direct message" if direct else f"{channel}" + (f" (thread {root})" if reply else "")
        lead = f"{sender or 'someone'} {'replied in' if reply else 'wrote in'} {where}"
        return Notification(
            source=self.name, event_kind=event_kind, subject=identity.removeprefix("slack:"), sender=sender,
            body=render(lead, text, ""), salient_body=text, lead=lead, partition_key=partition,
            conversation_identity=identity, message_id=f"slack:{channel}:{ts}", addresses=tuple(addresses),
            thread=partition if not direct else "",
            metadata={"channel": channel, "ts": ts, "thread_ts": root, "channel_type": str(event.get("channel_type") or ""),
                      "team": str(payload.get("team_id") or ""), "reply": reply, "direct": direct},
        )


def is_direct(channel: str, channel_type: Any) -> bool:
    """A DM or group DM: `channel_type` im/mpim, or a D-prefixed channel when the variant omits it."""
    if channel_type:
        return channel_type in ("im", "mpim")
    return channel.startswith("D")


def app_users(payload: Mapping[str, Any]) -> list[str]:
    """The app users the event was delivered for: `authorizations`, else `authed_users`."""
    users = [str(a.get("user_id")) for a in payload.get("authorizations") or [] if isinstance(a, Mapping) and a.get("user_id")]
    if not users:
        users = [str(u) for u in payload.get("authed_users") or [] if u]
    return list(dict.fromkeys(users))
