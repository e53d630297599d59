"""The node's Tier A file, as Django's settings see it.

Settings need two things from `crewlet.yaml` before anything else runs: the store path
(the one SQLite file this node owns, seed 002 "The store") and the keyring (Django's
SECRET_KEY is derived from it). The file is named by CREWLET_CONFIG (manage.py copies a
`--config` flag there). A file that does not load is kept as `load_error`, so commands
that need it report the refusal by field instead of Django failing at import.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent


@dataclass
class SettingsView:
    config: Any = None                 # engine.config.NodeConfig when it loaded
    load_error: str | None = None
    config_path: str | None = None
    keyring: Any = None                # engine.config.keyring.Keyring when the config carried one
    store_path: Path = field(default_factory=lambda: BASE_DIR / "var" / "company.db")


def read() -> SettingsView:
    """Load CREWLET_CONFIG if set; never raises."""
    view = SettingsView()
    path = os.environ.get("CREWLET_CONFIG")
    if not path:
        return view
    view.config_path = path
    try:
        from engine.config import load_node_config
        from engine.config.keyring import Keyring

        cfg = load_node_config(path)
        view.config = cfg
        store = Path(cfg.store.path)
        view.store_path = store if store.is_absolute() else (Path.cwd() / store)
        view.keyring = Keyring.from_config(cfg.secrets)
    except Exception as exc:  # reported by the command that needs the config
        view.load_error = str(exc)
    return view
