"""What the two remote kinds (openai and anthropic) share: one provider over a vendor's official
SDK, its clients shared between turns, its calls under the retry rules both keep
(seats/providers/retries.py)."""
from __future__ import annotations

import asyncio
import importlib
import random
from typing import Any, Callable

from seats.providers.clients import ClientFactory, Clients
from seats.providers.retries import BACKOFF_BASE_SECONDS, Retrying, Sleep


class SdkProvider:
    """A Provider over the SDK module named `SDK`. `clients` shares SDK clients between turns (a
    private one when None, built with `http_client_factory`)."""

    SDK: str = ""

    def __init__(self, config: Any, *, clients: Clients | None = None,
                 http_client_factory: ClientFactory | None = None, sleep: Sleep = asyncio.sleep,
                 jitter: Callable[[], float] = random.random, backoff_base: float = BACKOFF_BASE_SECONDS) -> None:
        self.key = config.name
        self.model = config.model
        self.config = config
        self.clients = clients or Clients(http_client_factory)
        self.sdk = importlib.import_module(self.SDK)  # here, not at the top: see seats/providers/clients.py
        self.retrying = Retrying(self.sdk, provider_key=config.name, base_url=config.base_url,
                                 timeout_seconds=config.timeout_seconds, max_retries=config.max_retries,
                                 sleep=sleep, jitter=jitter, backoff_base=backoff_base)
