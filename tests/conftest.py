"""Suite-wide set-up. The node config, keyring, tokens and test database are made by
`tests.settings` (DJANGO_SETTINGS_MODULE for the suite) before Django reads its settings."""
from __future__ import annotations

import shutil

from tests.settings import ADMIN_TOKEN, KEY_MATERIAL, READ_TOKEN, RUN_DIR  # noqa: F401  (re-exported for tests)


def pytest_unconfigure(config):
    shutil.rmtree(RUN_DIR, ignore_errors=True)
