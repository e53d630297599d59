"""Suite-wide set-up. The node config, keyring, tokens and test database are made by
`tests.settings` (DJANGO_SETTINGS_MODULE for the suite) before Django reads its settings."""
from __future__ import annotations

import os
import shutil

import pytest

from tests.settings import ADMIN_TOKEN, KEY_MATERIAL, READ_TOKEN, RUN_DIR  # noqa: F401  (re-exported for tests)


def pytest_unconfigure(config):
    shutil.rmtree(RUN_DIR, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """No test skips in CI: a skip there means a dependency `make test` failed to provide."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which the project does not allow: {report.longrepr}"


# -- long runs -----------------------------------------------------------------------------------
# A case marked `long` runs a timing at the product's default where that default is too slow for
# `make test` (a 45 s lease lapsing after a SIGKILL, say); its shortened twin runs in `make test`.
# They run with CREWLET_LONG_TESTS=1 (`make test-long`); otherwise they are deselected, never
# skipped, so the summary counts them apart.
LONG_RUNS = "CREWLET_LONG_TESTS"


def pytest_configure(config):
    config.addinivalue_line("markers", f"long: a default timing too slow for `make test`; runs with {LONG_RUNS}=1 (`make test-long`)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get(LONG_RUNS) == "1":
        return
    long = [item for item in items if item.get_closest_marker("long") is not None]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if item.get_closest_marker("long") is None]


# -- connections left in asgiref's sync thread ---------------------------------------------------
# `sync_to_async` runs every thread-sensitive call of a test without an outer `async_to_sync` on
# one process-wide thread, so a database connection a test's store read opened there outlives the
# test (pytest-django closes the main thread's only). Channels' consumers ask that thread to close
# old connections on every message, which touches a connection left there and, in a test without
# database access, refuses. Each test closes what it left on that thread.
@pytest.fixture(autouse=True)
def _close_connections_left_in_the_sync_thread():
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)


# A process forked from one that already ran tests (mutmut forks one per mutant, `make mutants`)
# inherits that thread's executor but not the thread: the executor counts its worker idle and
# starts none, so every thread-sensitive call, the fixture above among them, would wait forever.
# The child gets an executor of its own.
def _fresh_sync_thread_after_fork():
    from concurrent.futures import ThreadPoolExecutor

    from asgiref.sync import SyncToAsync

    SyncToAsync.single_thread_executor = ThreadPoolExecutor(max_workers=1)


os.register_at_fork(after_in_child=_fresh_sync_thread_after_fork)
