"""A listener on a fleet's NATS server: every message published on the subjects it names, as
the broker carried it. A process test reads what the nodes published from here rather than
from a node's store, whose writer a SIGKILL can cut short."""
from __future__ import annotations

import asyncio
import json
import threading

import nats

from tests.node.harness import eventually


class Tap:
    def __init__(self, url: str, token: str, subjects: list[str]) -> None:
        self.url, self.token, self.subjects = url, token, subjects
        self.messages: list[dict] = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="tap", daemon=True)

    def start(self) -> "Tap":
        self._thread.start()
        eventually(self._ready.is_set, 30, "the tap to subscribe")
        return self

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._listen())

    async def _listen(self) -> None:
        self._stop = asyncio.Event()
        nc = await nats.connect(self.url, token=self.token)

        async def heard(msg) -> None:
            try:
                body = json.loads(msg.data)
            except ValueError:
                return
            with self._lock:
                self.messages.append({"subject": msg.subject, **body})

        for subject in self.subjects:
            await nc.subscribe(subject, cb=heard)
        await nc.flush()
        self._ready.set()
        await self._stop.wait()
        await nc.close()

    def of(self, event_type: str) -> list[dict]:
        """The messages of one type, one per event id (a publish repeated under its id counts once)."""
        with self._lock:
            seen: dict[str, dict] = {}
            for m in self.messages:
                if m.get("type") == event_type:
                    seen.setdefault(m["id"], m)
        return list(seen.values())

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
