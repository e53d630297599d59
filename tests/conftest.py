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
