"""`python manage.py crewlet_task --config crewlet.yaml --seat alice "text"`: assign a task to an
agent seat (seed 000, "Routing": a task_assigned on the seat's inbox, exactly as the scheduler
publishes one).

The command goes through the node's API -- `POST /seats/{handle}/tasks` -- which builds the
event with `seats.tasks.build_task`: the route and the command cannot disagree. How the node is
found and the token given: `engine.config.apiclient`. It prints the route's answer: the event
id, the task id, the trace id and the dashboard URL of the trace.
"""
from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from engine.config.apiclient import ApiClient, ApiClientError


class Command(BaseCommand):
    help = "Assign a task to an agent seat of the running node's company."

    def add_arguments(self, parser):
        parser.add_argument("--config", default=None, help="the node's Tier A file (names the API address)")
        parser.add_argument("--seat", required=True, help="the agent seat's handle")
        parser.add_argument("text", help="what the seat should do")
        parser.add_argument("--url", default=None, help="a running node's API address (default: from --config)")
        parser.add_argument("--token", default=None, help="an admin token (prefer CREWLET_API_TOKEN)")

    def handle(self, *args, **opts):
        from django.conf import settings

        handle = opts["seat"]
        try:
            client = ApiClient.from_options(settings.NODE, opts["url"], opts["token"], needs="assign a task")
            status, body = client.request("POST", f"/seats/{handle}/tasks", {"text": opts["text"]})
        except ApiClientError as exc:
            raise CommandError(str(exc)) from None
        if status != 202:
            raise CommandError(f"--seat {handle}: refused ({status}): {body.get('detail')}")
        self.stdout.write(json.dumps(body) + "\n")
