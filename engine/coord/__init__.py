"""The coordination store: what the fleet shares (DESIGN.md, "engine/coord/").

`contract` (the CoordStore protocol and its errors), `local` (the in-process twin), `natskv`
(NATS KV on the stream's broker), `factory.open_coord` (the one way to get either), and on top
of it `leases` + `keeper` (seat, presence and duty leases with fencing epochs), `activation`
(the activation pointer and apply status), `ledger` (the completion ledger), `dedupe`.
"""
