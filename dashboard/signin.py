"""Signing in without holding up the API (seed 002, "Running the Engine + API").

Checking a password is deliberately slow (PBKDF2, about a third of a second of one core), and
Django runs every sync view on one thread, the one the REST API's reads run on: a stream of
sign-in attempts slowed `GET /events` from 8 ms to nearly a second. `off_the_api_thread(view)`
runs a sign-in view on its own two threads instead. Guessing is throttled by django-axes
(settings: `AXES_*`): a login and client locked out after AXES_FAILURE_LIMIT wrong passwords
is refused before any hash is computed.
"""
from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from asgiref.sync import sync_to_async

# Two: one sign-in hashing while another is answered; more would take the API's core.
_signins = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sign-in")


def off_the_api_thread(view: Callable[..., Any]) -> Callable[..., Any]:
    """An async view that runs the sync `view` on the sign-in threads."""

    @functools.wraps(view)
    async def wrapper(request, *args: Any, **kwargs: Any):
        return await sync_to_async(view, thread_sensitive=False, executor=_signins)(request, *args, **kwargs)

    return wrapper
