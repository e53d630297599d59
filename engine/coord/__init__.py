"""The coordination store: what the fleet shares (DESIGN.md, "engine/coord/"; seed 002,
"Replica count": "The slot governs the leases only -- the fleet's shared records are on the KV
regardless, because they have to survive a restart as much as a peer, and the KV lives on the
stream's own broker whichever value the slot holds").

`contract` (the CoordStore protocol and its errors), `local` (the in-process twin), `natskv`
(NATS KV on the stream's broker), `factory.open_coordination` (the one way to get them), and
on top of it `leases` + `keeper` (seat, presence and duty leases with fencing epochs, standing
claims taken back when lost), `ledger` (the completion ledger), `dedupe`.

Where things live, and why. A node holds two stores. Its records -- pauses, budget counters,
the activation pointer and generation, apply status, the completion ledger, dedupe, fencing
epochs, the removed seats' retirement clocks, and every shared record a later feature adds --
are always on the broker's KV, the single node's embedded broker included: that store is
durable (fsynced with `stream.sync: always`), already certified by the conformance suite and
already where a fleet needs them, so an operator's decision survives a SIGKILL on one node as
on three, with nothing new to back up. `coordination.type` chooses only where the leases live:
`local` keeps them in the process (a lease is about this process being alive, so a restart
that forgets it loses nothing and waits out no stale lease of its own), `embedded-kv` on the
KV with the records (so peers see them). Beside the in-memory queue twin (tests) there is no
broker, and both are the in-process twin.
"""
