"""Django settings for the test suite: a node config with a real keyring and known API tokens,
and a real SQLite file for the test database, both in a temporary directory, written before
the project's settings read CREWLET_CONFIG."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

RUN_DIR = Path(tempfile.mkdtemp(prefix="crewlet-test-"))

ADMIN_TOKEN = "test-admin-token-0123456789abcdef"
READ_TOKEN = "test-read-token-0123456789abcdef"
KEY_MATERIAL = "dGVzdC1rZXktbWF0ZXJpYWwtMDEyMzQ1Njc4OWFiY2RlZg"  # 35 bytes, base64url

TEST_CONFIG = f"""
node: {{id: test-node}}
stream: {{type: embedded, store_dir: "{RUN_DIR / 'stream'}"}}
store: {{path: "{RUN_DIR / 'company.db'}"}}
coordination: {{type: local}}
secrets:
  active_key_id: test
  keys: [{{id: test, material: "{KEY_MATERIAL}"}}]
api:
  host: 127.0.0.1
  port: 8000
  external_url: "http://127.0.0.1:8000"
  auth:
    admin: serve
    tokens:
      - {{id: admin, token: "{ADMIN_TOKEN}", grants: [admin]}}
      - {{id: viewer, token: "{READ_TOKEN}", grants: [read]}}
"""

(RUN_DIR / "crewlet.yaml").write_text(TEST_CONFIG)
os.environ["CREWLET_CONFIG"] = str(RUN_DIR / "crewlet.yaml")
os.environ.setdefault("CREWLET_TEST_DB", str(RUN_DIR / "test-company.db"))

from crewlet_site.settings import *  # noqa: E402,F401,F403

# Two more stores, for the fleet's history (tests/history): each simulated node owns one, as
# each node owns its SQLite file. Created only for the tests that ask for them.
for _alias in ("peer1", "peer2"):
    DATABASES[_alias] = {**DATABASES["default"], "NAME": str(RUN_DIR / f"{_alias}.db"),  # noqa: F405
                         "TEST": {"NAME": str(RUN_DIR / f"test-{_alias}.db")}}
