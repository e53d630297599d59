"""`python manage.py crewlet_validate --config crewlet.yaml [--company company.yaml]`.

Seed 002 ("Running the Engine + API", "Logging"): `crewlet validate` refuses what a node
would refuse at boot, each by field, so a deployment finds out on a laptop rather than at
bind time, and prints the advisories every start would log as `config_advisory`.

Output, one line each: `refused: <path>: <message>` for every refusal, `advisory: <path>:
<message>` for every advisory, `ok: ...` for each document that passed, and for each schedule
of a company that passed `schedule: <name>: next <three fire times on the company's clock>`. Exit status 2
on any refusal, 0 otherwise; never a traceback. It reads the files itself and does not
depend on Django's settings having loaded the config (they fall back when it is bad).
"""
from __future__ import annotations

import os
import sys
from datetime import datetime, timezone

from django.core.management.base import BaseCommand

from engine.config import (
    ConfigError,
    company_advisories,
    load_company,
    load_node_config,
    node_advisories,
)
from engine.config.cron import next_fires

REFUSED_STATUS = 2


def schedule_lines(company, now: datetime) -> list[str]:
    """Each schedule's next three fire times after `now`, on the company's clock."""
    out = []
    for schedule in company.schedules:
        fires = [d.astimezone(company.tz).isoformat() for d in next_fires(schedule.cron, company.tz, now, 3)]
        out.append(f"schedule: {schedule.name}: {schedule.cron!r} for {schedule.seat}, next {', '.join(fires) or 'never'}")
    return out


def validate(config_path: str | None, company_path: str | None, now: datetime | None = None) -> tuple[list[str], int]:
    """Return (the lines to print, the exit status) for the named files."""
    lines: list[str] = []
    refused = False
    if config_path:
        try:
            cfg = load_node_config(config_path)
        except ConfigError as exc:
            lines += [f"refused: {p}" for p in exc.problems]
            refused = True
        else:
            lines += [f"advisory: {a}" for a in node_advisories(cfg)]
            lines.append(f"ok: {config_path}: node {cfg.node.id}, stream {cfg.stream.type}, "
                         f"coordination {cfg.coordination.type}, api port {cfg.api.port}")
    if company_path:
        try:
            company = load_company(company_path)
        except ConfigError as exc:
            lines += [f"refused: {p}" for p in exc.problems]
            refused = True
        else:
            lines += [f"advisory: {a}" for a in company_advisories(company)]
            lines.append(f"ok: {company_path}: company {company.name}, {len(company.agent_seats())} agent "
                         f"and {len(company.human_seats())} human seats, digest {company.digest()[:12]}")
            lines += schedule_lines(company, now or datetime.now(timezone.utc))
    return lines, (REFUSED_STATUS if refused else 0)


class Command(BaseCommand):
    help = "Validate crewlet.yaml (and a company.yaml): print every refusal and advisory."
    requires_system_checks: list = []

    def add_arguments(self, parser):
        parser.add_argument("--config", default=None,
                            help="the node's Tier A file (default: $CREWLET_CONFIG)")
        parser.add_argument("--company", default=None, help="a company document to validate as well")

    def handle(self, *args, **opts):
        config_path = opts.get("config") or os.environ.get("CREWLET_CONFIG")
        company_path = opts.get("company")
        if not config_path and not company_path:
            self.stdout.write("refused: --config: name a crewlet.yaml to validate (or --company a company.yaml)")
            sys.exit(REFUSED_STATUS)
        try:
            lines, status = validate(config_path, company_path)
        except Exception as exc:  # never a traceback: say what failed and refuse
            lines, status = [f"refused: the validation itself failed: {type(exc).__name__}: {exc}"], REFUSED_STATUS
        for line in lines:
            self.stdout.write(line)
        if status:
            sys.exit(status)
