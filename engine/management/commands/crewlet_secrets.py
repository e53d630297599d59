"""`python manage.py crewlet_secrets keygen|devenv` (seed 002, "The single host", "Secret store").

keygen mints a key and prints the export line and the `secrets:` block to paste into
crewlet.yaml. devenv prints a development environment file (a keyring key, API tokens and
webhook secrets for the bundled examples); `make run` keeps it under var/ with mode 0600.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone

from django.core.management.base import BaseCommand, CommandError

from engine.config.keyring import generate_key_material, random_token

_KEY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]*$")


def env_name(key_id: str) -> str:
    return "CREWLET_SECRET_KEY_" + re.sub(r"[^A-Za-z0-9]", "_", key_id).upper()


class Command(BaseCommand):
    help = "Mint keyring keys (keygen) or a development environment file (devenv)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        keygen = sub.add_parser("keygen", help="mint a key and print the export line and the secrets: block")
        keygen.add_argument("--id", dest="key_id", default=None, help="key id (default: the current year and month)")
        sub.add_parser("devenv", help="print a development environment file for the bundled examples")

    def handle(self, *args, **opts):
        if opts["action"] == "keygen":
            return self._keygen(opts.get("key_id"))
        return self._devenv()

    def _keygen(self, key_id: str | None) -> None:
        key_id = key_id or datetime.now(timezone.utc).strftime("%Y-%m")
        if not _KEY_ID.match(key_id):
            raise CommandError(f"--id: {key_id!r} is not a key id (letters, digits, '_' and '-')")
        var = env_name(key_id)
        self.stdout.write(f"export {var}={generate_key_material()}\n")
        self.stdout.write("\n# crewlet.yaml\n")
        self.stdout.write(f'secrets:\n  active_key_id: "{key_id}"\n  keys:\n    - id: "{key_id}"\n      material: "${{{var}}}"\n')

    def _devenv(self) -> None:
        lines = [
            "# Development secrets for the bundled examples. Never commit this file.",
            f"CREWLET_SECRET_KEY_DEV={generate_key_material()}",
            f"CREWLET_API_TOKEN_FOUNDER={random_token()}",
            f"CREWLET_API_TOKEN_VIEWER={random_token()}",
            f"GITHUB_WEBHOOK_SECRET={random_token()}",
            f"SLACK_SIGNING_SECRET={random_token()}",
            f"GITLAB_WEBHOOK_TOKEN={random_token()}",
            f"JIRA_WEBHOOK_SECRET={random_token()}",
            f"MATTERMOST_WEBHOOK_TOKEN={random_token()}",
        ]
        self.stdout.write("\n".join(lines) + "\n")
