"""`python manage.py crewlet_node --config crewlet.yaml [--company company.yaml] [--roles ...]`

The product's main process (seed 002, "Running the Engine + API"). This command parses the
flags, validates the configuration, sets up logging, binds the listener, installs the signal
handlers and runs the node; the logic lives in `engine.node` (STYLE.md, "Long-running work").

A flag overrides the file only when it was given. Exit codes: 0 drained, 1 fatal (a boot
that failed, a connection closed for good, a second signal), 2 a configuration refusal,
69 the embedded broker died, 75 the watchdog.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys

from django.core.management.base import BaseCommand

from engine.config.tokens import refuses_admin
from engine.node import EXIT_CONFIG, EXIT_FATAL, Node, NodeTimings, logconfig
from engine.node.roles import RoleError, check_listener, parse_roles

log = logging.getLogger("engine.node")


def secrets_of(cfg) -> list[str]:
    """Every secret value the config carries, so no log line can show one."""
    values = [k.material for k in cfg.secrets.keys]
    values += [t.token for t in cfg.api.auth.tokens]
    if getattr(cfg.stream, "token", None):
        values.append(cfg.stream.token)
    return values


def banner(cfg, roles, base: str) -> str:
    """Where to look, printed once the listener is bound; the README shows it as printed."""
    lines = [f"Crewlet node {cfg.node.id} ({','.join(roles)}): {base}/"]
    if cfg.api.external_url and cfg.api.external_url.rstrip("/") != base:
        lines.append(f"  reached at    {cfg.api.external_url}")
    if "ingress" in roles:
        lines.append(f"  dashboard     {base}/dashboard/   (sign in with a user from: make superuser)")
    lines.append(f"  health        {base}/health   ready: {base}/ready")
    if "ingress" in roles:
        lines += [
            f"  REST API      {base}/events   (Authorization: Bearer <a token from api.auth.tokens>)",
            f"  API docs      {base}/api/docs",
        ]
        if refuses_admin(cfg):  # nothing to advertise: writes, /admin/ and the controls answer 403
            lines.append("  admin         refused on this node (api.auth.admin: refuse): reads only")
        else:
            lines.append(f"  admin         {base}/admin/")
    lines.append("Stop it with Ctrl-C (a second Ctrl-C stops at once).")
    return "\n".join(lines) + "\n"


def stopping_note(node) -> str:
    """What the first Ctrl-C says: how many turns the drain waits for, and how to cut it."""
    runtime = node.seat_runtime
    running = runtime.running() if runtime is not None else []
    if not running:
        return "crewlet: stopping: draining (press Ctrl-C again to stop at once)\n"
    turns = f"{len(running)} running turn{'s' if len(running) != 1 else ''} ({', '.join(running)})"
    return (f"crewlet: stopping: waiting for {turns} to finish; press Ctrl-C again to stop at once "
            "(their mail stays on the broker and is worked again after a restart)\n")


class Command(BaseCommand):
    help = "Run a Crewlet node: the consume loops, seat hosts, singleton duties and the HTTP surface."
    requires_system_checks: list = []

    def add_arguments(self, parser):
        parser.add_argument("--config", required=True, help="the node's Tier A file (crewlet.yaml)")
        parser.add_argument("--company", default=None, help="a company document to import as a new revision when it differs")
        parser.add_argument("--roles", default=None, help="comma-separated: data,seats,ingress,workers (default: all four)")
        parser.add_argument("--api-port", type=int, default=None, help="overrides api.port (0 binds nothing)")
        parser.add_argument("--api-host", default=None, help="overrides api.host")
        parser.add_argument("--log-level", default=None, help="debug | info | warn | error")
        parser.add_argument("--log-format", default=None, help="console | text | json")
        parser.add_argument("--log-file", default=None, help='a log file for this run ("" for none)')
        parser.add_argument("--debug", action="store_true", help="shorthand for --log-level debug")

    def handle(self, *args, **opts):
        sys.exit(self.run(opts))

    def fail(self, message: str, code: int) -> int:
        self.stderr.write(f"crewlet: {message}\n")
        return code

    def run(self, opts) -> int:
        from engine.config import ConfigError, load_node_config, node_advisories

        try:
            roles = parse_roles(opts["roles"])
        except RoleError as exc:
            return self.fail(str(exc), EXIT_CONFIG)
        try:
            cfg = load_node_config(opts["config"])
        except ConfigError as exc:
            return self.fail(f"--config {opts['config']}:\n{exc}", EXIT_CONFIG)
        # OTLP export (seed 002, "OTLP Export"), when the OTEL_EXPORTER_OTLP_* variables ask for
        # it: attached before the ASGI application loads its middleware (Django's instrumentation
        # is one), flushed once the node has drained.
        from engine.node import telemetry

        try:
            exporting = telemetry.attach(os.environ, cfg.node.id or "node")
        except telemetry.TelemetryRefused as exc:
            return self.fail(str(exc), EXIT_CONFIG)
        # The ASGI application sets Django up again, which reinstalls settings.LOGGING: load it
        # before the node's own logging is configured. Settings name it (ASGI_APPLICATION).
        from channels.routing import get_default_application

        application = get_default_application()

        settings, warnings = logconfig.settings_from(
            cfg.logging, level_flag=opts["log_level"], format_flag=opts["log_format"], debug=opts["debug"], file_flag=opts["log_file"]
        )
        try:
            logconfig.configure(settings, secrets=secrets_of(cfg))
        except OSError as exc:
            return self.fail(f"logging.file.path: {exc.filename}: {exc.strerror}", EXIT_CONFIG)
        for name, fields in warnings:
            log.warning(name, extra=fields)
        for advisory in node_advisories(cfg):
            log.warning("config_advisory", extra={"config": "bootstrap", "detail": advisory})
        if exporting is not None:
            log.info("otlp_exporter_attached", extra={"endpoint": exporting.endpoint})
        # One owner per store: refused here, before a port is bound or a file opened.
        from django.conf import settings as django_settings

        from engine.node import storelock

        try:
            locks = storelock.claim_node_stores(cfg, django_settings.DATABASES["default"]["NAME"])
        except storelock.StoreLockError as exc:
            log.error("store_lock_refused", extra={"error": str(exc)})
            return self.fail(str(exc), exc.exit_code)
        try:
            return self.serve_node(opts, cfg, roles, application)
        finally:
            storelock.release_all(locks)
            if exporting is not None and not exporting.flush():  # after the drain: its own spans go too
                log.warning("otlp_flush_incomplete", extra={"endpoint": exporting.endpoint})

    def serve_node(self, opts, cfg, roles, application) -> int:
        host = opts["api_host"] if opts["api_host"] is not None else cfg.api.host
        port = opts["api_port"] if opts["api_port"] is not None else cfg.api.port
        if not 0 <= port <= 65535:
            return self.fail(f"--api-port: expected an integer from 0 to 65535, got {port}", EXIT_CONFIG)
        try:
            check_listener(roles, port, cfg.api.public.port if cfg.api.public is not None else None)
        except RoleError as exc:
            return self.fail(str(exc), EXIT_CONFIG)

        from engine.node.server import ListenerError, bind, serve

        sock = None
        if port > 0:
            try:
                sock = bind(host, port)
            except ListenerError as exc:
                return self.fail(str(exc), EXIT_FATAL)
        public = None  # api.public: the webhooks' own socket (seed 002, "Exposing webhooks without the admin API")
        if sock is not None and cfg.api.public is not None:
            try:
                public = bind(cfg.api.public.host, cfg.api.public.port, field="api.public.port")
            except ListenerError as exc:
                sock.close()
                return self.fail(str(exc), EXIT_FATAL)
        timings = NodeTimings(revision_poll_seconds=cfg.node.revision_poll_seconds, sweep_seconds=cfg.node.sweep_seconds)
        node = Node(cfg, roles=roles, company_path=opts["company"], env=dict(os.environ), timings=timings,
                    imported_by=f"node:{cfg.node.id}")
        app = None
        if sock is not None:
            from engine.node.surface import surface

            app = surface(node, application, public.getsockname()[1] if public is not None else None)
            if public is not None:
                log.info("api_public_listening", extra={"address": "{}:{}".format(*public.getsockname()[:2])})
            bound_host, bound_port = sock.getsockname()[:2]
            log.info("api_listening", extra={"address": f"{bound_host}:{bound_port}", "ingress": "ingress" in roles})
            self.stdout.write(banner(cfg, roles, f"http://{bound_host}:{bound_port}"))
            self.stdout.flush()

        async def main() -> int:
            import asyncio

            loop = asyncio.get_running_loop()
            signals = {"count": 0}

            def on_signal(signum: int) -> None:
                signals["count"] += 1
                if signals["count"] > 1:
                    log.error("force_stop", extra={"signal": signal.Signals(signum).name})
                    os._exit(EXIT_FATAL)
                node.request_stop(f"{signal.Signals(signum).name} received")
                with contextlib.suppress(Exception):  # a note for the person at the terminal, never a failure
                    sys.stderr.write(stopping_note(node))
                    sys.stderr.flush()

            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, on_signal, signum)
            return await node.run()

        return serve(app, sock, main, extra=(public,) if public is not None else (),
                     trusted_proxies=tuple(cfg.api.trusted_proxies))
