"""The chat rule Slack and Mattermost share (seed 000, "Inbox Batching & Coalescing": partition
keys and conversation identities).

- A shared channel keys on channel + thread root: a top-level message keys on its own id, so
  its replies join it, and two unrelated asks in one channel never merge
  (`slack:C9:1718.001`). There the thread IS the conversation: key and identity coincide.
- A direct message (one-to-one or group) is one conversation however it is threaded: its
  identity is the bare channel (`slack:D1`). A top-level DM partitions on the whole channel,
  so four rapid messages are one batch; a DM thread reply keeps its thread key
  (`slack:D1:1718.001`) so the merged trigger never carries the wrong reply target.

A partition key is always the identity or a finer cut of it, so every event of one
partition carries one identity.
"""
from __future__ import annotations


def chat_keys(source: str, channel: str, message_id: str, thread_root: str, direct: bool) -> tuple[str, str]:
    """(partition key, conversation identity) of one chat message.

    `thread_root` is the root message's id for a reply (empty, or the message's own id, for
    a top-level message); `direct` says the channel is a DM or a group DM.
    """
    reply = bool(thread_root) and thread_root != message_id
    if direct:
        identity = f"{source}:{channel}"
        return (f"{identity}:{thread_root}" if reply else identity), identity
    root = thread_root if reply else message_id
    key = f"{source}:{channel}:{root}"
    return key, key
