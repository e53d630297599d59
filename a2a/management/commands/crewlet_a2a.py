"""`python manage.py crewlet_a2a --config crewlet.yaml ask --asker alice --target bob "brief"`,
`crewlet_a2a channels [--seat bob] [--state open]`, `crewlet_a2a channel ID` (seed 000,
"Ephemeral A2A channels").

`ask` asks as an agent seat would with its a2a_ask tool (`POST /a2a/ask`, into the same
`a2a.service.ask`): the target's answer wakes the asker. `channels` and `channel` read the
records, closed ones included for seven days: "why did my reply bounce". How the node is found
and the token given: `engine.config.apiclient`.
"""
from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from engine.config.apiclient import ApiClient, ApiClientError


class Command(BaseCommand):
    help = "Ask one agent seat as another would, or read the A2A channels, on the running node."

    def add_arguments(self, parser):
        parser.add_argument("verb", choices=("ask", "channels", "channel"))
        parser.add_argument("text", nargs="?", default=None, help="ask: the brief; channel: the channel id")
        parser.add_argument("--asker", default=None, help="ask: the agent seat asking")
        parser.add_argument("--target", default=None, help="ask: the agent seat asked")
        parser.add_argument("--seat", default=None, help="channels: a seat on either side")
        parser.add_argument("--state", default=None, help="channels: open or closed")
        parser.add_argument("--config", default=None, help="the node's Tier A file (names the API address)")
        parser.add_argument("--url", default=None, help="a running node's API address (default: from --config)")
        parser.add_argument("--token", default=None, help="an API token (prefer CREWLET_API_TOKEN)")

    def handle(self, *args, **opts):
        from django.conf import settings

        verb, text = opts["verb"], opts["text"]
        if verb == "ask":
            for flag in ("asker", "target"):
                if not opts[flag]:
                    raise CommandError(f"--{flag}: an ask names the seat asking (--asker) and the seat asked (--target)")
            if not text:
                raise CommandError("BRIEF: say what is asked (crewlet_a2a ask --asker alice --target bob \"...\")")
        if verb == "channel" and not text:
            raise CommandError("ID: name the channel to read")
        try:
            client = ApiClient.from_options(settings.NODE, opts["url"], opts["token"],
                                            needs="ask" if verb == "ask" else "read the channels")
            if verb == "ask":
                status, body = client.request("POST", "/a2a/ask", {"asker": opts["asker"], "target": opts["target"], "brief": text})
            elif verb == "channels":
                params = {k: opts[k] for k in ("seat", "state") if opts[k]}
                status, body = client.request("GET", "/a2a/channels", params=params)
            else:
                status, body = client.request("GET", f"/a2a/channels/{text}")
        except ApiClientError as exc:
            raise CommandError(str(exc)) from None
        if status not in (200, 202):
            raise CommandError(f"{verb}: refused ({status}): {body.get('detail')}")
        self.stdout.write(json.dumps(body) + "\n")
