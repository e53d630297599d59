"""Fixtures for the configuration tests: a valid Tier A document to bend, and the
environment the bundled examples reference."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from engine.config import ConfigError, parse_company, parse_node_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

KEY = "dGVzdC1rZXktbWF0ZXJpYWwtMDEyMzQ1Njc4OWFiY2RlZg"  # 35 bytes once base64url-decoded

EXAMPLE_ENV = {
    "CREWLET_SECRET_KEY_DEV": KEY,
    "CREWLET_API_TOKEN_FOUNDER": "founder-token-0123456789abcdef",
    "CREWLET_API_TOKEN_VIEWER": "viewer-token-0123456789abcdef",
    "GITHUB_WEBHOOK_SECRET": "gh-secret",
    "SLACK_SIGNING_SECRET": "slack-secret",
    "GITLAB_WEBHOOK_TOKEN": "gl-token",
    "JIRA_WEBHOOK_SECRET": "jira-secret",
    "MATTERMOST_WEBHOOK_TOKEN": "mm-token",
}

REMOVE = object()

BASE_NODE = {
    "node": {"id": "node-1"},
    "stream": {"type": "embedded", "store_dir": "var/stream"},
    "secrets": {"active_key_id": "k1", "keys": [{"id": "k1", "material": KEY}]},
    "api": {"port": 0},
}

BASE_COMPANY = {
    "name": "acme",
    "providers": {"llm": [{"name": "local", "kind": "scripted"}]},
    "org": {"seats": [
        {"handle": "maya", "kind": "human", "role": "founder"},
        {"handle": "alice", "kind": "agent", "role": "engineer", "reports_to": "maya"},
    ]},
}


def merged(base: dict, changes: dict) -> dict:
    """base with changes deep-merged in; a REMOVE value deletes the key."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is REMOVE:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = merged(out[key] if isinstance(out.get(key), dict) else {}, value)
        else:
            out[key] = value
    return out


def node_text(**changes) -> str:
    return yaml.safe_dump(merged(BASE_NODE, changes), sort_keys=False)


def company_text(**changes) -> str:
    return yaml.safe_dump(merged(BASE_COMPANY, changes), sort_keys=False)


def node_problems(text: str, env: dict | None = None) -> list[str]:
    """The refusals of a Tier A text (failing the test when it loads)."""
    with pytest.raises(ConfigError) as info:
        parse_node_config(text, env=env or {})
    return info.value.problems


def company_problems(text: str, env: dict | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_company(text, env=env or {})
    return info.value.problems


def refusal_at(problems: list[str], path: str) -> str:
    """The one refusal naming path (as its field path), or fail listing what there was."""
    found = [p for p in problems if p.startswith(path + ": ")]
    assert found, f"no refusal at {path}; got: {problems}"
    return found[0]


@pytest.fixture
def example_company():
    from engine.config import load_company

    return load_company(EXAMPLES / "company.yaml", env=EXAMPLE_ENV)
