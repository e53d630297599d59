"""`python manage.py crewlet_conformance --url nats://... [--token T | --creds FILE]
[--tls-ca FILE --tls-cert FILE --tls-key FILE] [--replicas N] [--select EXPR]`

Runs the queue conformance suite against an operator's own NATS deployment, in streams of its
own that it removes after, and prints a pass/fail table (engine.management.conformance).
Exit status 0 when every case passed, 1 when any failed, 2 for a flag that cannot be used or a
deployment that could not be reached.
"""
from __future__ import annotations

import sys

from django.core.management.base import BaseCommand

from engine.management.conformance import ConformanceError, Target, certify, table


class Command(BaseCommand):
    help = "Certify a NATS deployment with the queue conformance suite, in prefixed streams removed after."
    requires_system_checks: list = []

    def add_arguments(self, parser):
        parser.add_argument("--url", required=True, help="the server(s), as stream.url takes them (a comma-separated list)")
        parser.add_argument("--token", default=None, help="a bearer token (stream.token)")
        parser.add_argument("--creds", default=None, help="an NKey/JWT credentials file (stream.credentials)")
        parser.add_argument("--tls-ca", default=None, help="the CA bundle to verify the server with (stream.tls.ca)")
        parser.add_argument("--tls-cert", default=None, help="this client's certificate (stream.tls.cert)")
        parser.add_argument("--tls-key", default=None, help="its key (stream.tls.key)")
        parser.add_argument("--replicas", type=int, default=1, help="the replica count to create streams with (stream.replicas)")
        parser.add_argument("--select", default=None, help="only the cases whose names match this pytest -k expression")

    def handle(self, *args, **opts):
        target = Target(url=opts["url"], token=opts["token"], credentials=opts["creds"], tls_ca=opts["tls_ca"],
                        tls_cert=opts["tls_cert"], tls_key=opts["tls_key"], replicas=opts["replicas"])
        try:
            cases, prefix = certify(target, select=opts["select"])
        except ConformanceError as exc:
            self.stderr.write(f"crewlet: conformance: {exc}\n")
            sys.exit(2)
        self.stdout.write(table(cases, target, prefix))
        sys.exit(0 if cases and all(c.passed for c in cases) else 1)
