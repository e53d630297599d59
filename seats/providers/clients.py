"""The vendor SDK clients a node's turns share (the official `openai` and `anthropic` SDKs).

A client holds a connection pool, so one is built per provider entry and kept rather than one
per call: a tool loop of ten rounds reuses one connection instead of opening ten. Clients are
keyed by what they are built from (kind, name, base URL, key, timeout), so a revision that
changes an entry gets a new client and the old one is closed with the rest at the end.
The SDKs' own retries are off: `retries.py` keeps the project's rules. Each SDK is imported
where it is first used, off the node's loop (`load_sdks`): they take seconds to import on a
loaded machine, and this module is reached from the URL map, which the node loads while it
answers its probes (see seats/tools/remote.py).
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib
import sys
from typing import Any, Callable, Iterable

import httpx

ClientFactory = Callable[..., httpx.AsyncClient]


class Clients:
    """SDK clients by provider entry; `http_client_factory(timeout=...)` builds the httpx client
    under each (the SDK's default when None)."""

    def __init__(self, http_client_factory: ClientFactory | None = None) -> None:
        self.http_client_factory = http_client_factory
        self._clients: dict[tuple, Any] = {}

    def openai(self, config: Any) -> Any:
        """A client for an `openai` entry. An entry with no key gets a stand-in the SDK insists
        on; the provider omits the header it would make of it (`no_key_headers`)."""
        import openai

        return self._get("openai", config, lambda **kw: openai.AsyncOpenAI(
            api_key=config.api_key or "no-key", base_url=config.base_url, **kw))

    def anthropic(self, config: Any) -> Any:
        """A client for an `anthropic` entry (the SDK sends x-api-key and anthropic-version)."""
        import anthropic

        return self._get("anthropic", config, lambda **kw: anthropic.AsyncAnthropic(
            api_key=config.api_key or "no-key", base_url=config.base_url, **kw))

    def _get(self, kind: str, config: Any, build: Callable[..., Any]) -> Any:
        key = (kind, config.name, config.base_url, config.api_key, config.timeout_seconds)
        client = self._clients.get(key)
        if client is None:
            timeout = httpx.Timeout(config.timeout_seconds)
            extra: dict[str, Any] = {"timeout": timeout, "max_retries": 0}
            if self.http_client_factory is not None:
                extra["http_client"] = self.http_client_factory(timeout=timeout)
            client = self._clients[key] = build(**extra)
        return client

    @staticmethod
    def no_key_headers(sdk: Any, config: Any, header: str) -> dict[str, Any]:
        """The request headers an entry with no key sends: its stand-in key's header omitted
        (a local endpoint needs none, and a stand-in must not reach a server that checks)."""
        return {} if config.api_key else {header: sdk.Omit()}

    async def aclose(self) -> None:
        """Close every client (their connection pools)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()


SDK_MODULES = {"openai": "openai", "anthropic": "anthropic"}  # provider kind -> the SDK it needs


async def load_sdks(modules: Iterable[str]) -> None:
    """Import `modules` in a worker thread, so the first turn that needs one does not stop the
    node's loop for the seconds an SDK takes to import."""
    wanted = [m for m in modules if m not in sys.modules]
    if wanted:
        await asyncio.to_thread(lambda: [importlib.import_module(m) for m in wanted])
