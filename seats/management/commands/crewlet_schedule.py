"""`python manage.py crewlet_schedule list | fire NAME --config crewlet.yaml`: the company's
schedules as the running node sees them, and firing one now (seed 000, "Routing", producer 2).

`list` reads `GET /schedules` (each schedule's next fires, last fire and the scheduler duty's
holder); `fire NAME` posts `POST /schedules/{name}/fire`, which publishes through the very path
the scheduler takes (`seats.schedules.publish_fire`), marked as an operator's fire. How the node
is found and the token given: `engine.config.apiclient`.
"""
from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from engine.config.apiclient import ApiClient, ApiClientError


class Command(BaseCommand):
    help = "List the company's schedules, or fire one now, on the running node."

    def add_arguments(self, parser):
        verbs = parser.add_subparsers(dest="verb", required=True)
        listing = verbs.add_parser("list", help="every schedule: next fires, last fire, the duty's holder")
        firing = verbs.add_parser("fire", help="fire one schedule now, as the scheduler would")
        firing.add_argument("name", help="the schedule to fire")
        for sub in (listing, firing):
            sub.add_argument("--config", default=None, help="the node's Tier A file (names the API address)")
            sub.add_argument("--url", default=None, help="a running node's API address (default: from --config)")
            sub.add_argument("--token", default=None, help="an API token (prefer CREWLET_API_TOKEN)")

    def handle(self, *args, **opts):
        from django.conf import settings

        verb, name = opts["verb"], opts.get("name")
        try:
            client = ApiClient.from_options(settings.NODE, opts["url"], opts["token"],
                                            needs="fire a schedule" if verb == "fire" else "read the schedules")
            if verb == "list":
                status, body = client.request("GET", "/schedules")
            else:
                status, body = client.request("POST", f"/schedules/{name}/fire")
        except ApiClientError as exc:
            raise CommandError(str(exc)) from None
        if status not in (200, 202):
            raise CommandError(f"{'NAME ' + name if name else verb}: refused ({status}): {body.get('detail')}")
        self.stdout.write(json.dumps(body) + "\n")
