"""`python manage.py crewlet_a2a ask --asker alice --target bob "brief" --config crewlet.yaml`,
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
        verbs = parser.add_subparsers(dest="verb", required=True)
        asking = verbs.add_parser("ask", help="ask --target as --asker would with its a2a_ask tool")
        asking.add_argument("text", help="the brief: what is asked")
        asking.add_argument("--asker", required=True, help="the agent seat asking")
        asking.add_argument("--target", required=True, help="the agent seat asked")
        listing = verbs.add_parser("channels", help="the channels, of one seat and in one state if asked")
        listing.add_argument("--seat", default=None, help="a seat on either side")
        listing.add_argument("--state", default=None, help="open or closed")
        one = verbs.add_parser("channel", help="one channel's record")
        one.add_argument("text", metavar="ID", help="the channel id")
        for sub in (asking, listing, one):
            sub.add_argument("--config", default=None, help="the node's Tier A file (names the API address)")
            sub.add_argument("--url", default=None, help="a running node's API address (default: from --config)")
            sub.add_argument("--token", default=None, help="an API token (prefer CREWLET_API_TOKEN)")

    def handle(self, *args, **opts):
        from django.conf import settings

        verb, text = opts["verb"], opts.get("text")
        try:
            client = ApiClient.from_options(settings.NODE, opts["url"], opts["token"],
                                            needs="ask" if verb == "ask" else "read the channels")
            if verb == "ask":
                status, body = client.request("POST", "/a2a/ask", {"asker": opts["asker"], "target": opts["target"], "brief": text})
            elif verb == "channels":
                params = {k: opts[k] for k in ("seat", "state") if opts.get(k)}
                status, body = client.request("GET", "/a2a/channels", params=params)
            else:
                status, body = client.request("GET", f"/a2a/channels/{text}")
        except ApiClientError as exc:
            raise CommandError(str(exc)) from None
        if status not in (200, 202):
            raise CommandError(f"{verb}: refused ({status}): {body.get('detail')}")
        self.stdout.write(json.dumps(body) + "\n")
