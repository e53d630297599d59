"""Queue figures on the embedded broker, printed (not a test).

    .venv/bin/python benchmarks/queue.py [--quick]

For `stream.sync: always` (every write fsynced before its ack, the default) and for a 30 s
sync window, in one run on one host:
  (a) publish -> `subscribe` handler -> ack throughput, one topic and 100 seat inboxes in
      parallel, beside a raw nats-py loop doing the same publish / fetch(1) / ack on the same
      broker, and the ratio of the two (target 0.7 or more);
  (b) publish-to-handler latency, p50 and p99, at a light load (target p50 under 5 ms);
  (c) `ensure_subscription` for 1,000 new mailboxes (target under 5 s in all);
  (e) with `sync: always`, what keeping busy seats' mail alive costs: 100 seats each in a
      turn, holding one message and then a full drain of 20, with the default Tuning (ack
      window 60 s, a heartbeat every 20 s); the in-progress acknowledgements (`+WPI`) the
      broker receives, counted on the ack subjects over one ack window, beside the queue's
      publish rate in the same window (the (a) workload over 100 other inboxes, publishing
      for the whole window) and the (a) figure without busy seats (target: a small fraction);
and once, (d) the in-memory twin's throughput on the same workloads.
"""
from __future__ import annotations

import os
import sys

# This folder holds queue.py, which would shadow the standard library's `queue` for every
# import that follows; run from here, drop the folder from the import path first.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crewlet_site.settings")

from engine.queue import topics  # noqa: E402
from engine.queue.broker import EmbeddedBroker  # noqa: E402
from engine.queue.contract import BatchOptions, Tuning  # noqa: E402
from engine.queue.jetstream import JetStreamQueue  # noqa: E402
from engine.queue.jetstream_connection import Dial  # noqa: E402
from events.envelope import Event  # noqa: E402

GROUP = "bench"
SEATS = 100
ROUNDS = 2


def _event(i: int) -> Event:
    return Event(type="bench_probe", payload={"i": i, "sent": time.perf_counter()})


async def _until(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached")
        await asyncio.sleep(0.005)


# -- (a) throughput through the queue ------------------------------------------------------
async def queue_throughput(q, inboxes: list[str], total: int) -> float:
    """Messages per second: publishers (one per inbox, concurrently) and one `subscribe` per
    inbox, until every message was handled and acked."""
    for inbox in inboxes:
        await q.ensure_subscription(inbox, GROUP)
    handled = 0

    async def handler(delivery):
        nonlocal handled
        handled += 1

    for inbox in inboxes:
        await q.subscribe(inbox, GROUP, handler)
    per = total // len(inboxes)

    async def publisher(inbox: str) -> None:
        for i in range(per):
            await q.publish(inbox, _event(i))

    async def all_acked() -> bool:
        if handled < per * len(inboxes):
            return False
        for inbox in inboxes:
            if await q.pending(inbox, GROUP):
                return False
        return True

    began = time.perf_counter()
    await asyncio.gather(*(publisher(i) for i in inboxes))
    await _until(all_acked)
    elapsed = time.perf_counter() - began
    for inbox in inboxes:
        await q.detach(inbox, GROUP)
        await q.delete_subscription(inbox, GROUP)
    return per * len(inboxes) / elapsed


async def raw_throughput(url: str, token: str, subjects: list[str], total: int) -> float:
    """The same workload on bare nats-py: js.publish, pull_subscribe fetch(1), ack."""
    import nats

    nc = await nats.connect(url, token=token)
    js = nc.jetstream()
    per = total // len(subjects)
    subs = []
    for subject in subjects:
        durable = "raw_" + topics.durable_name(subject, GROUP)[:60]
        subs.append(await js.pull_subscribe(subject, durable=durable, stream="CREWLET_AGENT"))
    done = 0

    async def publisher(subject: str) -> None:
        for i in range(per):
            await js.publish(subject, _event(i).to_json())  # the same event, encoded as the queue does

    async def consumer(sub) -> None:
        nonlocal done
        got = 0
        while got < per:
            try:
                msgs = await sub.fetch(1, timeout=5)
            except nats.errors.TimeoutError:
                continue
            for msg in msgs:
                Event.from_json(msg.data)  # the queue decodes every message; so does this
                await msg.ack()
                got += 1
        done += got

    began = time.perf_counter()
    await asyncio.gather(*(publisher(s) for s in subjects), *(consumer(s) for s in subs))
    await nc.flush()
    elapsed = time.perf_counter() - began
    for subject, sub in zip(subjects, subs, strict=True):
        await sub.unsubscribe()
        await js.delete_consumer("CREWLET_AGENT", "raw_" + topics.durable_name(subject, GROUP)[:60])
    await nc.close()
    return done / elapsed


# -- (b) latency ------------------------------------------------------------------------------
async def latency(q, count: int, spacing: float) -> tuple[float, float]:
    inbox = topics.agent_inbox("latency")
    await q.ensure_subscription(inbox, GROUP)
    samples: list[float] = []

    async def handler(delivery):
        samples.append(time.perf_counter() - delivery.event.payload["sent"])

    await q.subscribe(inbox, GROUP, handler)
    for i in range(count):
        await q.publish(inbox, _event(i))
        await asyncio.sleep(spacing)

    async def all_seen() -> bool:
        return len(samples) >= count

    await _until(all_seen)
    await q.detach(inbox, GROUP)
    await q.delete_subscription(inbox, GROUP)
    samples.sort()
    return statistics.median(samples) * 1000, samples[int(len(samples) * 0.99) - 1] * 1000


# -- (c) provisioning -----------------------------------------------------------------------
async def ensure_many(q, count: int, in_flight: int = 1, prefix: str = "m") -> float:
    """Seconds to create `count` new mailboxes, `in_flight` calls at a time (1: one by one,
    as a node's boot walk does it by default)."""
    handles = [f"{prefix}{i}" for i in range(count)]

    async def worker(mine: list[str]) -> None:
        for handle in mine:
            await q.ensure_subscription(topics.agent_inbox(handle), topics.inbox_group(handle))

    began = time.perf_counter()
    await asyncio.gather(*(worker(handles[k::in_flight]) for k in range(in_flight)))
    return time.perf_counter() - began


# -- (e) keeping busy seats' mail alive -----------------------------------------------------
async def busy_seats(q, url: str, token: str, held: int, seconds: float) -> dict:
    """SEATS seats, each in a turn that outlasts the sample and holding a drain of `held`
    messages (the running partition and the ones waiting behind it). Count the `+WPI` the
    broker receives over `seconds`, on a connection of its own listening to the ack subjects
    (what reaches the broker, not what the client meant to send), while the (a) workload runs
    over SEATS other inboxes for the whole sample."""
    import nats

    nc = await nats.connect(url, token=token)
    wpi = 0

    async def on_ack(msg) -> None:
        nonlocal wpi
        if msg.data == b"+WPI":
            wpi += 1

    await nc.subscribe("$JS.ACK.CREWLET_AGENT.>", cb=on_ack)
    await nc.flush()
    release = asyncio.Event()
    running = 0

    async def turn(batch) -> None:
        nonlocal running
        running += 1
        await release.wait()

    inboxes = [topics.agent_inbox(f"busy{held}x{i}") for i in range(SEATS)]
    for inbox in inboxes:
        await q.ensure_subscription(inbox, GROUP)
        for n in range(held):  # distinct conversations: one partition each, dispatched in turn
            await q.publish(inbox, Event(type="bench_probe", payload={"partition_key": f"c{n}"}))
    for inbox in inboxes:
        await q.subscribe_batch(inbox, GROUP, BatchOptions(linger_seconds=0, max_batch=20), turn)

    async def all_busy() -> bool:
        return running >= SEATS

    await _until(all_busy)
    # The (a) workload over SEATS other inboxes, for the whole sample: publishers in a loop,
    # one `subscribe` per inbox, every message handled and acked.
    load_inboxes = [topics.agent_inbox(f"load{held}x{i}") for i in range(SEATS)]
    async def work(delivery) -> None:
        return None

    for inbox in load_inboxes:
        await q.ensure_subscription(inbox, GROUP)
        await q.subscribe(inbox, GROUP, work)
    sent_before, wpi_before = q.in_progress_sent, wpi
    began = time.perf_counter()
    deadline = began + seconds  # the heartbeat runs on its own timer meanwhile

    published = 0

    async def publisher(inbox: str) -> None:
        nonlocal published
        while time.perf_counter() < deadline:
            await q.publish(inbox, _event(published))
            published += 1

    await asyncio.gather(*(publisher(inbox) for inbox in load_inboxes))
    await nc.flush()
    elapsed = time.perf_counter() - began
    received, sent = wpi - wpi_before, q.in_progress_sent - sent_before
    release.set()

    async def all_acked() -> bool:
        for inbox in inboxes:
            if await q.pending(inbox, GROUP):
                return False
        return True

    await _until(all_acked)
    for inbox in inboxes + load_inboxes:
        await q.detach(inbox, GROUP)
        await q.delete_subscription(inbox, GROUP)
    await nc.close()
    return {"held": held, "received": received, "sent": sent, "seconds": elapsed, "rate": received / elapsed,
            "publish_rate": published / elapsed}


# -- runs -------------------------------------------------------------------------------------
async def jetstream_run(sync: str, sizes: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="crewlet-bench-") as store:
        broker = EmbeddedBroker(store_dir=store, server_name="bench", sync=sync)
        await broker.start()
        q = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="bench", tuning=Tuning())
        try:
            out: dict = {}
            for kind, count in (("one", 1), ("seats", SEATS)):
                # Alternating rounds, best of each: the disk's fsync time drifts over a run,
                # and whichever went second would otherwise carry the drift.
                ours, raw = [], []
                for round_ in range(ROUNDS):
                    ours.append(await queue_throughput(
                        q, [topics.agent_inbox(f"{kind}{round_}x{i}") for i in range(count)], sizes[kind]))
                    raw.append(await raw_throughput(
                        broker.client_url, broker.token,
                        [topics.agent_inbox(f"raw{kind}{round_}x{i}") for i in range(count)], sizes[kind]))
                out[f"{kind}_queue"], out[f"{kind}_raw"] = max(ours), max(raw)
            out["latency_p50_ms"], out["latency_p99_ms"] = await latency(q, sizes["latency"], 0.005)
            out["ensure_1000_s"] = await ensure_many(q, 1000)
            out["ensure_1000_16_s"] = await ensure_many(q, 1000, in_flight=16, prefix="c")
            if sizes.get("busy_seconds") and sync == "always":
                out["busy"] = [await busy_seats(q, broker.client_url, broker.token, held, sizes["busy_seconds"])
                               for held in (1, 20)]
            return out
        finally:
            await q.close()
            await broker.stop()


async def memory_run(sizes: dict) -> dict | None:
    try:
        from engine.queue.memory import MemoryBroker
    except ImportError:
        return None
    broker = MemoryBroker(tuning=Tuning())
    q = broker.client("bench")
    try:
        return {
            "one_queue": await queue_throughput(q, [topics.agent_inbox("solo")], sizes["one"]),
            "seats_queue": await queue_throughput(q, [topics.agent_inbox(f"seat{i}") for i in range(SEATS)], sizes["seats"]),
        }
    finally:
        await q.close()


def report(label: str, r: dict) -> None:
    print(f"\n== embedded broker, stream.sync: {label}")
    for kind, name in (("one", "1 topic"), ("seats", f"{SEATS} seat inboxes")):
        ours, raw = r[f"{kind}_queue"], r[f"{kind}_raw"]
        print(f"  (a) {name:<17} queue {ours:8.0f} msg/s   raw nats-py {raw:8.0f} msg/s   ratio {ours / raw:.2f}  (target >= 0.7)")
    print(f"  (b) latency, light load   p50 {r['latency_p50_ms']:.2f} ms   p99 {r['latency_p99_ms']:.2f} ms  (target p50 < 5 ms)")
    print(f"  (c) ensure_subscription x1000   one by one {r['ensure_1000_s']:.2f} s   "
          f"16 in flight {r['ensure_1000_16_s']:.2f} s  (target < 5 s)")
    tuning = Tuning()
    for busy in r.get("busy", ()):
        publish = busy["publish_rate"]
        print(f"  (e) {SEATS} busy seats holding {busy['held']:>2} message(s) each (ack window "
              f"{tuning.ack_wait_seconds:g} s, heartbeat {tuning.heartbeat_seconds:g} s): {busy['received']} +WPI "
              f"in {busy['seconds']:.1f} s (client counted {busy['sent']}) = {busy['rate']:.1f} msg/s, "
              f"{busy['rate'] / publish:.1%} of the {publish:.0f} msg/s the queue published (to subscribed inboxes) "
              f"in the same window ((a) without busy seats: {r['seats_queue']:.0f} msg/s)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller samples (a smoke run)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    sizes = ({"one": 500, "seats": 1000, "latency": 100, "busy_seconds": Tuning().heartbeat_seconds + 1} if args.quick
             else {"one": 2000, "seats": 6000, "latency": 500, "busy_seconds": Tuning().ack_wait_seconds})
    print(f"queue benchmark: {sizes['one']} msgs on 1 topic, {sizes['seats']} over {SEATS} inboxes (best of "
          f"{ROUNDS} alternating rounds), {sizes['latency']} latency samples at 5 ms spacing; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    for sync in ("always", "30s"):
        report(sync, await jetstream_run(sync, sizes))
    memory = await memory_run(sizes)
    if memory is None:
        print("\n(d) memory twin: engine/queue/memory.py is not there")
    else:
        print(f"\n== (d) in-memory twin\n  1 topic {memory['one_queue']:8.0f} msg/s   "
              f"{SEATS} seat inboxes {memory['seats_queue']:8.0f} msg/s")


if __name__ == "__main__":
    asyncio.run(main())
