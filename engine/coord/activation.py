"""The activation pointer and each node's apply status (seed 002, "What changed": config
activation is "delivered by the control plane — a shared activation pointer whose own
revision is the epoch, polled by every node"; "The apply status is the one that hides ...
the bucket's one-minute age is what makes that node vanish"; DESIGN.md, "Configuration":
which revision is active is a pointer in the coordination store, polled by every node).

The company document's revisions are stored in each node's own store; which one is active is
one key in `crewlet_activation`, and the store revision of that key is the activation epoch:
it grows with every activation, a rollback to an old revision included, so a node polling it
can tell "the same revision again" from "nothing new". Each node reports what it applied to
`crewlet_apply_status`, a bucket whose short age clears the report of a node that is gone.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from engine.coord.contract import CoordStore, KeyExists, RevisionMismatch

ACTIVATION_BUCKET = "crewlet_activation"
APPLY_STATUS_BUCKET = "crewlet_apply_status"
ACTIVE_KEY = "active"
APPLY_STATUS_AGE_SECONDS = 60.0  # seed 002: a node that stops reporting vanishes within a minute


@dataclass(frozen=True)
class ActivePointer:
    """The active company revision: its id, its content digest, and the activation epoch."""

    revision_id: str
    digest: str
    epoch: int


@dataclass(frozen=True)
class ApplyStatus:
    """One node's report: the revision it applied, how that went (`status`), the activation
    epoch it has `reached`, and when it last said so (`reported_at`)."""

    node_id: str
    revision_id: str
    status: str
    reached: int
    reported_at: float


class Activation:
    """The control plane's two records on the coordination store."""

    def __init__(self, store: CoordStore, *, status_age: float = APPLY_STATUS_AGE_SECONDS) -> None:
        self.store = store
        self.status_age = float(status_age)
        self._provisioned = False

    async def provision(self) -> None:
        """Create both buckets if missing: the pointer does not age, the statuses do."""
        await self.store.ensure_bucket(ACTIVATION_BUCKET)
        info = await self.store.ensure_bucket(APPLY_STATUS_BUCKET, max_age=self.status_age)
        self.status_age = info.max_age or self.status_age
        self._provisioned = True

    async def set_active(self, revision_id: str, digest: str, *,
                         expected_epoch: int | None = None) -> ActivePointer:
        """Point the fleet at `revision_id`; return the pointer with its new epoch. With
        `expected_epoch`, only if the pointer is still at that epoch (RevisionMismatch
        otherwise), so two activations racing cannot both believe they won."""
        await self._ready()
        value = json.dumps({"revision_id": revision_id, "digest": digest}).encode()
        if expected_epoch is None:
            epoch = await self.store.put(ACTIVATION_BUCKET, ACTIVE_KEY, value)
        elif expected_epoch == 0:  # "only if nothing was ever activated"
            try:
                epoch = await self.store.create(ACTIVATION_BUCKET, ACTIVE_KEY, value)
            except KeyExists as err:
                raise RevisionMismatch("activation pointer: already set") from err
        else:
            epoch = await self.store.update(ACTIVATION_BUCKET, ACTIVE_KEY, value, expected_epoch)
        return ActivePointer(revision_id=revision_id, digest=digest, epoch=epoch)

    async def get_active(self) -> ActivePointer | None:
        """The active pointer, or None before any revision was activated."""
        await self._ready()
        entry = await self.store.get(ACTIVATION_BUCKET, ACTIVE_KEY)
        if entry is None:
            return None
        raw = json.loads(entry.value)
        return ActivePointer(revision_id=raw["revision_id"], digest=raw["digest"], epoch=entry.revision)

    async def report_applied(self, node_id: str, revision_id: str, status: str, reached: int) -> None:
        """Record this node's apply status; repeat it well inside `status_age` to stay listed."""
        await self._ready()
        value = json.dumps({"revision_id": revision_id, "status": status, "reached": reached}).encode()
        await self.store.put(APPLY_STATUS_BUCKET, node_id, value)

    async def applied_status(self) -> dict[str, ApplyStatus]:
        """Every node's current report, by node id (a node silent for `status_age` is gone)."""
        await self._ready()
        out: dict[str, ApplyStatus] = {}
        for node_id in await self.store.keys(APPLY_STATUS_BUCKET):
            entry = await self.store.get(APPLY_STATUS_BUCKET, node_id)
            if entry is None:
                continue  # aged out between the listing and the read
            raw = json.loads(entry.value)
            out[node_id] = ApplyStatus(node_id=node_id, revision_id=raw["revision_id"],
                                       status=raw["status"], reached=raw["reached"],
                                       reported_at=entry.updated)
        return out

    async def _ready(self) -> None:
        if not self._provisioned:
            await self.provision()
