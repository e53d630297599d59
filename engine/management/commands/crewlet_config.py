"""`python manage.py crewlet_config import FILE | show | revisions` (seed 002: `crewlet config
import` writes a file as a new active revision).

Against a stopped node, `import` writes this node's store and the node announces the
activation when it next starts; against a running node, give `--url` and `--token` (an
admin token) and the import goes through `PUT /config`, so every node converges with no
restart. Either way the document is validated first and a refusal names the field.
"""
from __future__ import annotations

import getpass
import json
import sys

from django.core.management.base import BaseCommand, CommandError

from engine import revisions
from engine.config import ConfigError, parse_company


class Command(BaseCommand):
    help = "Import, show and list company revisions."

    def add_arguments(self, parser):
        parser.add_argument("--config", default=None, help="the node's Tier A file (names the store)")
        sub = parser.add_subparsers(dest="action", required=True)
        imp = sub.add_parser("import", help="write a company document as a new active revision")
        imp.add_argument("file")
        imp.add_argument("--url", default=None, help="a running node's API address, e.g. http://127.0.0.1:8000")
        imp.add_argument("--token", default=None, help="an admin token (or CREWLET_API_TOKEN)")
        imp.add_argument("--by", default=None, help="who imports it (default: the OS user)")
        sub.add_parser("show", help="print the active revision's document")
        sub.add_parser("revisions", help="list the revisions this node's store holds")

    def handle(self, *args, **opts):
        from django.conf import settings

        if getattr(settings, "NODE", None) is not None and settings.NODE.load_error:
            raise CommandError(f"--config {settings.NODE.config_path}:\n{settings.NODE.load_error}")
        action = opts["action"]
        if action == "import":
            return self._import(opts)
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
        if action == "show":
            row = revisions.latest_activated()
            if row is None:
                raise CommandError("no revision has been activated on this node's store; run `crewlet_config import FILE`")
            self.stdout.write(row.document)
        else:
            for row in revisions.list_revisions():
                when = row.imported_at.strftime("%Y-%m-%d %H:%M:%S UTC")
                gen = f"generation {row.generation}" if row.generation else "not activated"
                self.stdout.write(f"{row.id:>5}  {gen:<16} {row.digest[:12]}  {when}  by {row.imported_by}  ({row.source})\n")

    def _import(self, opts) -> None:
        path = opts["file"]
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror or exc}") from None
        try:
            company = parse_company(text)
        except ConfigError as exc:
            raise CommandError(f"{path}: refused\n{exc}") from None
        by = opts["by"] or getpass.getuser()
        if opts["url"]:
            return self._put(opts["url"], opts["token"], text, path)
        from django.core.management import call_command
        from django.db.models import Max

        from engine.models import CompanyRevision

        call_command("migrate", interactive=False, verbosity=0)
        latest = revisions.latest_activated()
        if latest is not None and latest.digest == company.digest():
            self.stdout.write(f"unchanged: {path} is the active revision (generation {latest.generation})\n")
            return
        generation = (CompanyRevision.objects.aggregate(m=Max("generation"))["m"] or 0) + 1
        row = revisions.store_revision(text, company, by, "file", generation)
        self.stdout.write(f"imported {path} as generation {row.generation} ({row.digest[:12]}); the node activates it when it next starts\n")

    def _put(self, url: str, token: str | None, text: str, path: str) -> None:
        import os

        import httpx

        token = token or os.environ.get("CREWLET_API_TOKEN")
        if not token:
            raise CommandError("--token: an admin token is needed to import through a running node (or set CREWLET_API_TOKEN)")
        try:
            response = httpx.put(f"{url.rstrip('/')}/config", content=text.encode(), headers={
                "Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}, timeout=30)
        except httpx.HTTPError as exc:
            raise CommandError(f"--url {url}: {exc}") from None
        try:
            body = response.json()
        except ValueError:
            body = {"detail": response.text[:200]}
        if response.status_code >= 400:
            raise CommandError(f"{path}: the node refused it ({response.status_code}): {body.get('detail')}")
        self.stdout.write(json.dumps(body) + "\n")
        sys.stdout.flush()
