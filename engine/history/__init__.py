"""The fleet's history: where every event is kept, and how it is read back (seed 000, "Reading
the fleet's history"; seed 002, "The event store", "Custody: the rows of a node without data").

- `custody`: a node without the data role hands its events to one data node in batches
  (`CustodySender`); the data nodes take them in one group, write them, claim each batch
  create-only and settle their copies (`CustodyKeeper`), so every event published anywhere is
  stored exactly once somewhere.
- `eventfan`: the node's side of the fleet's history reads (events.fleet): questions to the
  other live nodes over the queue's request/reply (`QueueTransport`), the roster from the
  presence leases (`presence_roster`), and this node's answers (`HistoryAnswerer`).
- `horizon`: the data node's sweep of rows past the history's 30-day floor.
- `reads`: the threads store reads and custody writes run on, off the event loop.

This package sits beside engine.queue and engine.coord (it uses both, and the events app's
store functions); the node builds its services and hands each what it needs.
"""
