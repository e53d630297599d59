"""Company revisions: import, activation, and what a node applies (seed 002, "Running the
Engine + API": `crewlet config import` writes a file as a new active revision; DESIGN.md,
"Configuration": revisions live in the node's store, the active one is a pointer in the
coordination store, polled by every node).

The activation record carries the document itself, sealed with the keyring, so a node that
never saw the import (a peer, or this node after a restart on a fresh store) can verify it
and keep its own copy. The store is one node's; the pointer is the fleet's, and it is durable
(the broker's KV, `engine.coord.factory`), so a restart finds it where it was.

Generations only grow: each activation takes the pointer's generation plus one, and never
less than one past the highest generation this node's store has recorded for another document
(`floor`), so a pointer that was lost (a stream store wiped, a store from before the pointer
was durable) cannot hand out a number another revision already carries. Activating the document the pointer
already names changes nothing (`Activation.changed` is False): a node restarted with the
same `--company` file makes no new revision.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone

from engine.config import Company, ConfigError, parse_company
from engine.coord.contract import CoordStore, KeyExists, RevisionMismatch
from engine.config.keyring import Keyring

log = logging.getLogger("engine.revisions")

ACTIVATION_BUCKET = "crewlet_config"
POINTER_KEY = "active"
APPLIED_PREFIX = "applied."
APPLIED_TTL_SECONDS = 120.0  # a node's apply status is short-lived: a departed node's fades


class RevisionError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(f"config: {message}")


@dataclass(frozen=True)
class Activation:
    """The pointer: which document the fleet serves, and its fleet-wide generation number."""

    generation: int
    digest: str
    document: str
    imported_by: str
    imported_at: str
    seal: str
    changed: bool = field(default=False, compare=False)  # this call moved the pointer (not recorded)

    def body(self) -> bytes:
        return json.dumps(
            {"generation": self.generation, "digest": self.digest, "document": self.document,
             "imported_by": self.imported_by, "imported_at": self.imported_at},
            sort_keys=True,
        ).encode()

    def encode(self) -> bytes:
        return json.dumps({**json.loads(self.body()), "seal": self.seal}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> "Activation":
        data = json.loads(raw)
        return cls(int(data["generation"]), data["digest"], data["document"], data["imported_by"], data["imported_at"], data["seal"])


def validate_document(text: str, env=None) -> Company:
    """Parse and validate a company document; ConfigError names every refused field."""
    return parse_company(text, env=env)


# -- the store (sync: called through sync_to_async from the loop) ------------------------
def store_revision(text: str, company: Company, imported_by: str, source: str, generation: int | None = None):
    """Write a revision row (one per digest and generation), returning it."""
    from engine.models import CompanyRevision

    now = datetime.now(timezone.utc)
    existing = CompanyRevision.objects.filter(digest=company.digest(), generation=generation).first()
    if existing is not None:
        return existing
    return CompanyRevision.objects.create(
        digest=company.digest(), document=text, imported_by=imported_by, imported_at=now,
        source=source, generation=generation, activated_at=now if generation else None, company_name=company.name,
    )


def latest_activated():
    """The newest revision this node's store has seen activated, or None."""
    from engine.models import CompanyRevision

    return CompanyRevision.objects.filter(generation__isnull=False).order_by("-generation", "-id").first()


def highest_generation(other_than: str | None = None) -> int:
    """The highest generation this node's store has recorded (for a document other than the
    digest `other_than`, when given), 0 when none. Activating a document at least one past
    this never gives a generation to a second document; the document's own earlier number
    (an offline `crewlet_config import`) may be taken again, so it is not recorded twice."""
    from django.db.models import Max

    from engine.models import CompanyRevision

    rows = CompanyRevision.objects.all() if other_than is None else CompanyRevision.objects.exclude(digest=other_than)
    return rows.aggregate(top=Max("generation"))["top"] or 0


def list_revisions(limit: int = 100) -> list:
    from engine.models import CompanyRevision

    return list(CompanyRevision.objects.order_by("-id")[:limit])


# -- the pointer (async, on the coordination store) -------------------------------------
async def read_pointer(coord: CoordStore, keyring: Keyring) -> Activation | None:
    """The active revision, verified; None when the fleet has none. A record whose seal does
    not verify under this keyring is refused (logged), never applied."""
    await coord.ensure_bucket(ACTIVATION_BUCKET)
    entry = await coord.get(ACTIVATION_BUCKET, POINTER_KEY)
    if entry is None:
        return None
    activation = Activation.decode(entry.value)
    if not keyring.verify(activation.body(), activation.seal, purpose="company-revision"):
        log.error("config_revision_seal_invalid", extra={"generation": activation.generation})
        raise RevisionError(f"the active revision (generation {activation.generation}) is not sealed by a key in secrets.keys")
    return activation


async def activate(coord: CoordStore, keyring: Keyring, text: str, company: Company, imported_by: str,
                   floor: int = 0) -> Activation:
    """Make `text` the fleet's active revision: compare-and-set the pointer to the next
    generation, past both the pointer's and `floor` (the highest this node has recorded).

    Returns the new activation (`changed` True), or the current one unchanged when it already
    carries this digest (`changed` False).
    """
    await coord.ensure_bucket(ACTIVATION_BUCKET)
    digest = company.digest()
    for _ in range(16):
        entry = await coord.get(ACTIVATION_BUCKET, POINTER_KEY)
        current = Activation.decode(entry.value) if entry is not None else None
        if current is not None and current.digest == digest:
            return current
        generation = max(current.generation if current else 0, floor) + 1
        draft = Activation(generation, digest, text, imported_by, datetime.now(timezone.utc).isoformat(), "")
        sealed = Activation(generation, digest, text, imported_by, draft.imported_at,
                            keyring.sign(draft.body(), purpose="company-revision"), changed=True)
        try:
            if entry is None:
                await coord.create(ACTIVATION_BUCKET, POINTER_KEY, sealed.encode())
            else:
                await coord.update(ACTIVATION_BUCKET, POINTER_KEY, sealed.encode(), entry.revision)
        except (KeyExists, RevisionMismatch):
            continue  # another node activated concurrently; read again
        return sealed
    raise RevisionError("the activation pointer kept changing under sixteen attempts; try again")


async def report_applied(coord: CoordStore, node_id: str, generation: int, status: str, reached: str, error: str = "",
                         ttl: float = APPLIED_TTL_SECONDS) -> None:
    """This node's apply status, short-lived (a departed node's fades after `ttl`)."""
    await coord.ensure_bucket(ACTIVATION_BUCKET)
    body = json.dumps({"node": node_id, "generation": generation, "status": status, "reached": reached, "error": error}).encode()
    await coord.put(ACTIVATION_BUCKET, f"{APPLIED_PREFIX}{node_id}", body, ttl=ttl)


async def applied_status(coord: CoordStore) -> list[dict]:
    await coord.ensure_bucket(ACTIVATION_BUCKET)
    out = []
    for key in await coord.keys(ACTIVATION_BUCKET, prefix=APPLIED_PREFIX):
        entry = await coord.get(ACTIVATION_BUCKET, key)
        if entry is not None:
            out.append(json.loads(entry.value))
    return out


__all__ = [
    "Activation", "ConfigError", "RevisionError", "activate", "applied_status", "highest_generation", "latest_activated",
    "list_revisions", "read_pointer", "report_applied", "store_revision", "validate_document",
]
