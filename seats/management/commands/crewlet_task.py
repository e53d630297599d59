"""`python manage.py crewlet_task --config crewlet.yaml --seat alice "text"`: assign a task to an
agent seat (seed 000, "Routing": a task_assigned on the seat's inbox, exactly as the scheduler
publishes one).

The embedded broker is private to the running node (a per-boot token that never leaves the
process), so the command goes through the node's API -- `POST /seats/{handle}/tasks` -- which
builds the event with `seats.tasks.build_task`: the route and the command cannot disagree.
The address is `--url`, else the node's own listener as the config it is given says:
`http://{api.host}:{api.port}` (a wildcard host is reached on 127.0.0.1) -- the port the node
binds, whatever `api.external_url` says a browser uses. The admin token is CREWLET_API_TOKEN
(or `--token`, which other users can see in a process listing). It prints the route's answer:
the event id, the task id, the trace id and the dashboard URL of the trace.
"""
from __future__ import annotations

import json
import os

from django.core.management.base import BaseCommand, CommandError


def api_url(config) -> str | None:
    """The node's own listener from its Tier A config, None when it serves none."""
    api = getattr(config, "api", None)
    if api is None or not api.port:
        return None
    host = api.host if api.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"http://{host}:{api.port}"


class Command(BaseCommand):
    help = "Assign a task to an agent seat of the running node's company."

    def add_arguments(self, parser):
        parser.add_argument("--config", default=None, help="the node's Tier A file (names the API address)")
        parser.add_argument("--seat", required=True, help="the agent seat's handle")
        parser.add_argument("text", help="what the seat should do")
        parser.add_argument("--url", default=None, help="a running node's API address (default: from --config)")
        parser.add_argument("--token", default=None, help="an admin token (prefer CREWLET_API_TOKEN)")

    def handle(self, *args, **opts):
        import httpx
        from django.conf import settings

        tier_a = settings.NODE  # crewlet_site.nodeconfig: the --config file as the settings read it
        url = opts["url"]
        if not url:
            if tier_a.config is None:
                error = tier_a.load_error or "no config was given"
                raise CommandError(f"--config: cannot read the node's API address ({error}); or pass --url")
            url = api_url(tier_a.config)
            if not url:
                raise CommandError("api.port: the node serves no API (port 0); pass --url of a node that does")
        token = opts["token"] or os.environ.get("CREWLET_API_TOKEN")
        if not token:
            raise CommandError("CREWLET_API_TOKEN: an admin token is needed to assign a task (or pass --token)")
        handle = opts["seat"]
        try:
            response = httpx.post(f"{url.rstrip('/')}/seats/{handle}/tasks", json={"text": opts["text"]},
                                  headers={"Authorization": f"Bearer {token}"}, timeout=30)
        except httpx.HTTPError as exc:
            raise CommandError(f"--url {url}: the node did not answer ({exc}); is it running, on this port?") from None
        try:
            body = response.json()
        except ValueError:
            body = {"detail": response.text[:200]}
        if response.status_code != 202:
            raise CommandError(f"--seat {handle}: refused ({response.status_code}): {body.get('detail')}")
        self.stdout.write(json.dumps(body) + "\n")
