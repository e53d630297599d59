"""Mattermost outgoing webhooks: the shared token rides the body's `token` field (JSON, or a form
when the webhook posts `application/x-www-form-urlencoded`), `post_id` is the delivery id;
channel + thread root keys as Slack's do (seed 000, "Inbox Batching & Coalescing"; "Distributed
Tracing": a chat parser's own filtering is logged as `mattermost_post_skipped`).

The token is checked before the body is parsed: a bounded scan finds the `token` field's
candidates (`bytes.find` over a form, a literal-prefixed pattern over JSON; no objects built,
at most MAX_CANDIDATES looked at), and a
body without the right one is refused naming `token`; only a delivery that carries it is
parsed, the parse bounded (MAX_FORM_FIELDS, the JSON reader's depth) and the parsed `token`
compared again. The recorded and queued body has its token removed (`scrubbed`): a delivery
record is served to read-only readers.

Who a post reaches: the usernames it @-mentions and, in a DM (`channel_type` D or G, or a
`<id>__<id>` channel name), the other party, through `integrations.mattermost.users` (user name
or user id -> seat handle or role).
"""
from __future__ import annotations

import hmac
import json
import re
from typing import Any, Mapping
from urllib.parse import parse_qs, unquote_plus

from notify.sources.base import (
    Address,
    BaseSource,
    Ignored,
    Notification,
    ParseError,
    PayloadError,
    SignatureError,
    body_digest,
    check_token,
    decode_json,
    header,
    render,
)
from notify.sources.chat import chat_keys

MENTION = re.compile(r"(?<![\w@])@([a-z0-9][a-z0-9._-]*[a-z0-9_])", re.I)
DM_NAME = re.compile(r"^([a-z0-9]{26})__([a-z0-9]{26})$")
LOG_EVENT = "mattermost_post_skipped"
# An outgoing webhook's form has about fifteen fields; a form of thousands is not Mattermost.
MAX_FORM_FIELDS = 256
# Candidates for the token, found without parsing: `token=<value>` as a form field (bytes.find,
# about 6 ms over 8 MiB, where a regular expression anchored on `^|&` took 186 ms), and a JSON
# string under a "token" key (a literal-prefixed pattern: 7 ms over 8 MiB). Any depth: a
# candidate still has to equal the secret, and the parsed top-level field is compared again.
# Token values are short (1,024 bounds each), and a body offering more than MAX_CANDIDATES is
# not Mattermost's (its form names the field once; a value's own '=' arrives as %3D).
MAX_TOKEN_BYTES = 1024
MAX_CANDIDATES = 16
_JSON_TOKEN = re.compile(rb'"token"\s*:\s*("(?:[^"\\]|\\.){0,%d}")' % MAX_TOKEN_BYTES)


def is_form(headers: Mapping[str, str]) -> bool:
    return "x-www-form-urlencoded" in header(headers, "Content-Type").lower()


def _form_tokens(body: bytes) -> list[str]:
    out: list[str] = []
    position, looked = 0, 0
    while looked < MAX_CANDIDATES:
        found = body.find(b"token=", position)
        if found < 0:
            break
        looked += 1
        position = found + 6
        if found == 0 or body[found - 1:found] == b"&":
            end = body.find(b"&", position, position + MAX_TOKEN_BYTES + 1)
            value = body[position:end] if end >= 0 else body[position:position + MAX_TOKEN_BYTES + 1]
            if len(value) <= MAX_TOKEN_BYTES:
                out.append(unquote_plus(value.decode("latin-1")))
    return out


def token_candidates(headers: Mapping[str, str], body: bytes) -> list[str]:
    """Every value the body offers as its token, found by a bounded scan (nothing parsed)."""
    if is_form(headers):
        return _form_tokens(body)
    out = []
    for index, match in enumerate(_JSON_TOKEN.finditer(body)):
        if index >= MAX_CANDIDATES:
            break
        try:
            value = json.loads(match.group(1))
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(value, str):
            out.append(value)
    return out


class Mattermost(BaseSource):
    name = "mattermost"
    secret_field = "token"
    signature_header = "token"  # a body field: outgoing webhooks carry no signature header
    noise_log_event = LOG_EVENT
    kept_headers = ("User-Agent", "Content-Type")

    def decode(self, headers: Mapping[str, str], body: bytes) -> Any:
        if is_form(headers):
            try:
                form = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(body),
                                max_num_fields=MAX_FORM_FIELDS)
            except UnicodeDecodeError as exc:
                raise PayloadError(f"body: not a form ({exc})") from None
            except ValueError as exc:
                if "Max number of fields" in str(exc):
                    raise PayloadError(f"body: a form of more than {MAX_FORM_FIELDS} fields is not an outgoing "
                                       "webhook's") from None
                raise PayloadError(f"body: not a form ({exc})") from None
            return {k: v[-1] for k, v in form.items()}
        return decode_json(body)

    def verify(self, secret: bytes, headers: Mapping[str, str], body: bytes, now: float) -> None:
        candidates = token_candidates(headers, body)
        if not candidates:
            raise SignatureError("token", "missing; the delivery must carry the integration's token")
        if not any(hmac.compare_digest(secret, c.encode()) for c in candidates):
            raise SignatureError("token", "does not match the integration's token")
        # The sender knows the token: parse (bounded) and compare the field itself. A body that
        # carries it yet cannot be parsed is the edge's 400 (its decode refuses it next).
        try:
            given = self.decode(headers, body).get("token")
        except PayloadError:
            return
        check_token(secret, str(given or ""), "token")

    def scrubbed(self, headers: Mapping[str, str], body: bytes, payload: Any) -> bytes:
        """The body without its token: no delivery record or queued copy keeps the credential."""
        if is_form(headers):  # decoded already: at most MAX_FORM_FIELDS fields
            return b"&".join(field for field in body.split(b"&") if not field.startswith(b"token="))
        return json.dumps({k: v for k, v in payload.items() if k != "token"}).encode()

    def delivery_id(self, headers: Mapping[str, str], payload: Any, body: bytes) -> str:
        return str(payload.get("post_id") or "") or body_digest(body)

    def event_kind(self, headers: Mapping[str, str], payload: Any) -> str:
        return "posted"

    def parse(self, event_kind: str, payload: Any) -> Notification | Ignored | None:
        kind = str(payload.get("type") or "")
        if kind.startswith("system_"):
            return Ignored(LOG_EVENT, f"a system post ({kind})")
        if str(payload.get("delete_at") or "0") not in ("", "0"):
            return Ignored(LOG_EVENT, "a deleted post")
        sender, sender_id = str(payload.get("user_name") or ""), str(payload.get("user_id") or "")
        if not sender and not sender_id:
            return Ignored(LOG_EVENT, "a bot message")
        channel, post = str(payload.get("channel_id") or ""), str(payload.get("post_id") or "")
        if not channel or not post:
            raise ParseError(f"{'channel_id' if not channel else 'post_id'}: missing")
        root = str(payload.get("root_id") or "")
        name = str(payload.get("channel_name") or "")
        dm = DM_NAME.match(name)
        direct = str(payload.get("channel_type") or "") in ("D", "G") or dm is not None
        partition, identity = chat_keys("mattermost", channel, post, root, direct)
        reply = bool(root) and root != post
        text = str(payload.get("text") or "")
        addresses = [Address(u, "mention") for u in dict.fromkeys(MENTION.findall(text))]
        if dm is not None:
            addresses += [Address(uid, "dm") for uid in dm.groups() if uid != sender_id]
        where = "a direct message" if direct else (f"~{name}" if name else channel) + (f" (thread {root})" if reply else "")
        lead = f"{sender or sender_id} {'replied in' if reply else 'wrote in'} {where}"
        return Notification(
            source=self.name, event_kind=event_kind, subject=identity.removeprefix("mattermost:"),
            sender=sender or sender_id, sender_aka=(sender_id,) if sender and sender_id else (),
            body=render(lead, text, ""), salient_body=text, lead=lead, partition_key=partition,
            conversation_identity=identity, message_id=f"mattermost:{post}", addresses=tuple(addresses),
            thread=partition if not direct else "",
            metadata={"channel": channel, "channel_name": name, "post_id": post, "root_id": root,
                      "team": str(payload.get("team_domain") or payload.get("team_id") or ""), "reply": reply,
                      "direct": direct, "trigger_word": str(payload.get("trigger_word") or "")},
        )
