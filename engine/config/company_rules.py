"""The company document's cross-field refusals and its advisories.

Refusals: a seat named twice (seed 000, "Routing": a handle names one inbox), a
`reports_to` or a schedule or an integration user naming no seat, a schedule aimed at a
human (a human has no inbox), a token budget on a human seat (seed 002, "Token Budgets":
per seat means an agent seat's), a cron expression the scheduler could not fire, an
integration secret that is empty, a tool server whose transport lacks what it needs (a
command for stdio, an http(s) URL for http) or carries the other's fields, a tool server
offered to a seat that is no agent seat or a role no agent seat has, a scripted tool call
naming no tool server, a `max_iter` on a human seat. Advisories: a company with no model provider (seed
000: valid, and its agents hold their mail until one is added), ceilings that can never
bind (seed 002: "the ceilings crewlet validate warns can never bind"), and the like.
"""
from __future__ import annotations

import itertools

from typing import Any
from urllib.parse import urlsplit

import re

from engine.config.cron import cron_problem
from engine.config.errors import describe_value, field_path

_SECRET_FIELDS = ("webhook_secret", "signing_secret", "token")

# A server's name is the first half of every tool name the model sees (`notes__append`), and
# both providers accept ^[a-zA-Z0-9_-]{1,64}$ there: 32 leaves the tool its 30 characters.
SERVER_NAME = re.compile(r"^[a-zA-Z0-9-]{1,32}$")


def company_refusals(blocks: dict[str, Any]) -> list[str]:
    """Every cross-field refusal the decoded blocks earn, each `path: message`."""
    out: list[str] = []
    if "name" in blocks and not blocks["name"].strip():
        out.append("name: empty: a company needs a name (its agent ids are derived from it)")
    org = blocks.get("org")
    seats = {s.handle: s for s in org.seats} if org is not None else None
    tools = blocks.get("tools")
    servers = {server.name for server in tools.mcp} if tools is not None else None
    if blocks.get("providers") is not None:
        out += _provider_refusals(blocks["providers"].llm, servers)
    if org is not None:
        out += _seat_refusals(org.seats)
    if tools is not None:
        out += _tool_server_refusals(tools.mcp, seats)
    schedules = blocks.get("schedules") or []
    for i, schedule in enumerate(schedules):
        if schedule is not None:  # None: an item refused on its own (engine.config.company._salvaged)
            out += _schedule_refusals(i, schedule, seats)
    out += _duplicates("schedules", "name", schedules)
    if blocks.get("integrations") is not None:
        out += _integration_refusals(blocks["integrations"], seats)
    return out


def _provider_refusals(llm: list, servers: set[str] | None) -> list[str]:
    out = _duplicates("providers.llm", "name", llm)
    for i, provider in enumerate(llm):
        if not provider.name.strip():
            out.append(f"providers.llm[{i}].name: empty: a provider needs a name")
        if provider.kind in ("openai", "anthropic"):
            if not _is_http_url(provider.base_url):
                out.append(f"providers.llm[{i}].base_url: expected an http or https URL such as "
                           f"https://api.example.com/v1, got {describe_value(provider.base_url)}")
            if not provider.model.strip():
                out.append(f"providers.llm[{i}].model: empty: name the model to ask for")
        if provider.kind == "scripted" and servers is not None:
            for j, call in enumerate(provider.tool_calls):
                path = f"providers.llm[{i}].tool_calls[{j}]"
                if call.server not in servers:
                    known = ", ".join(sorted(servers)) or "none is declared"
                    out.append(f"{path}.server: {describe_value(call.server)} names no server in tools.mcp "
                               f"({known}); declare it there or remove the call")
                if not call.tool.strip():
                    out.append(f"{path}.tool: empty: name one of the server's tools")
    return out


def _is_http_url(value: str) -> bool:
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _tool_server_refusals(servers: list, seats: dict | None) -> list[str]:
    out = _duplicates("tools.mcp", "name", servers)
    roles = {s.role for s in seats.values() if s.kind == "agent" and s.role} if seats is not None else None
    for i, server in enumerate(servers):
        path = f"tools.mcp[{i}]"
        if not SERVER_NAME.match(server.name):
            out.append(f"{path}.name: {describe_value(server.name)}: a tool server's name is 1 to 32 letters, "
                       "digits and '-' (it prefixes every tool name the model sees, as <name>__<tool>)")
        if server.transport == "stdio":
            if not server.command or not server.command[0].strip():
                out.append(f"{path}.command: missing: a stdio server is a command to start, such as "
                           "[\".venv/bin/python\", \"examples/tools/notes.py\"]")
            for name in ("url", "headers"):
                if getattr(server, name):
                    out.append(f"{path}.{name}: a stdio server is started, not dialled: remove {name}, "
                               "or set transport: http")
        else:
            if server.url is None or not _is_http_url(server.url):
                out.append(f"{path}.url: expected an http or https URL such as https://mcp.example.com/mcp, "
                           f"got {describe_value(server.url)}")
            for name in ("command", "env"):
                if getattr(server, name):
                    out.append(f"{path}.{name}: an http server is dialled, not started: remove {name}, "
                               "or set transport: stdio")
        if server.seats is not None and server.roles is not None:
            out.append(f"{path}.roles: give seats or roles, not both")
        for j, handle in enumerate(server.seats or []):
            if seats is None:
                break
            seat = seats.get(handle)
            if seat is None:
                out.append(f"{path}.seats[{j}]: {describe_value(handle)} names no seat in org.seats")
            elif seat.kind != "agent":
                out.append(f"{path}.seats[{j}]: {describe_value(handle)} is a human seat: tools are for agent seats")
        for j, role in enumerate(server.roles or []):
            if roles is not None and role not in roles:
                out.append(f"{path}.roles[{j}]: {describe_value(role)} is the role of no agent seat in org.seats")
    return out


def _seat_refusals(seats: list) -> list[str]:
    out = _duplicates("org.seats", "handle", seats)
    handles = {s.handle for s in seats}
    for i, seat in enumerate(seats):
        path = f"org.seats[{i}]"
        if seat.reports_to is not None:
            if seat.reports_to == seat.handle:
                out.append(f"{path}.reports_to: {describe_value(seat.reports_to)} is this seat itself")
            elif seat.reports_to not in handles:
                out.append(f"{path}.reports_to: {describe_value(seat.reports_to)} names no seat in org.seats")
        if seat.kind == "human" and seat.token_budget.windows():
            out.append(f"{path}.token_budget: {seat.handle} is a human seat, and a token budget caps an "
                       "agent seat's model spend; remove it")
        if seat.kind == "human" and seat.max_iter is not None:
            out.append(f"{path}.max_iter: {seat.handle} is a human seat, which runs no turn; remove it")
    out += _cycles(seats)
    return out


def _cycles(seats: list) -> list[str]:
    """A reporting line that comes back to where it started, named once per cycle."""
    boss = {s.handle: s.reports_to for s in seats if s.reports_to and s.reports_to != s.handle}
    index = {s.handle: i for i, s in enumerate(seats)}
    reported: set[str] = set()
    out = []
    for start in boss:
        chain, handle = [start], boss[start]
        while handle in boss and handle not in chain:
            chain.append(handle)
            handle = boss[handle]
        if handle in chain and not reported.intersection(chain):
            loop = chain[chain.index(handle):]
            reported.update(loop)
            out.append(f"org.seats[{index[loop[0]]}].reports_to: a reporting cycle: "
                       f"{' -> '.join(loop + [loop[0]])}")
    return out


def _schedule_refusals(i: int, schedule, seats: dict | None) -> list[str]:
    out = []
    path = f"schedules[{i}]"
    problem = cron_problem(schedule.cron)
    if problem:
        out.append(f"{path}.cron: {problem}")
    if not schedule.task.strip():
        out.append(f"{path}.task: empty: say what the seat is asked to do")
    if seats is not None:
        seat = seats.get(schedule.seat)
        if seat is None:
            out.append(f"{path}.seat: {describe_value(schedule.seat)} names no seat in org.seats")
        elif seat.kind == "human":
            out.append(f"{path}.seat: {describe_value(schedule.seat)} is a human seat: a schedule assigns "
                       "a task to an agent's inbox, and a human has none")
    return out


def _integration_refusals(integrations, seats: dict | None) -> list[str]:
    out = []
    for source, block in integrations.configured().items():
        for name in _SECRET_FIELDS:
            if name in type(block).model_fields and not getattr(block, name):
                out.append(f"integrations.{source}.{name}: empty: a delivery cannot be verified without it")
        if seats is None:
            continue
        for user, handle in block.users.items():
            if handle not in seats:
                path = field_path(("integrations", source, "users", user))
                out.append(f"{path}: {describe_value(handle)} names no seat in org.seats")
    return out


def _duplicates(path: str, attribute: str, items: list) -> list[str]:
    first: dict[str, int] = {}
    out = []
    for i, item in enumerate(items):
        if item is None:
            continue
        value = getattr(item, attribute)
        if value in first:
            out.append(f"{path}[{i}].{attribute}: {describe_value(value)} is already the {attribute} of "
                       f"{path}[{first[value]}]")
        else:
            first[value] = i
    return out


def company_advisories(company) -> list[str]:
    """What a valid company document carries as a consequence, one `path: message` each."""
    out: list[str] = []
    if not company.providers.llm:
        out.append("providers.llm is empty: agent seats will hold their mail until a provider is added")
    if company.org.seats and not company.agent_seats():
        out.append("org.seats has no agent seat: nothing in this company runs a turn")
    elif not company.org.seats:
        out.append("org.seats is empty: the company has no seats to route work to")
    out += _never_binding("token_budget", company.token_budget)
    for i, seat in enumerate(company.org.seats):
        path = f"org.seats[{i}]"
        out += _never_binding(f"{path}.token_budget", seat.token_budget)
        for window, ceiling in seat.token_budget.windows().items():
            company_ceiling = company.token_budget.windows().get(window)
            if company_ceiling is not None and ceiling >= company_ceiling:
                out.append(f"{path}.token_budget.{window}: {ceiling} is not below the company's "
                           f"token_budget.{window} ({company_ceiling}), so it can never bind")
        if seat.kind == "human" and seat.placement is not None:
            out.append(f"{path}.placement: {seat.handle} is a human seat, which runs on no node; "
                       "the placement is ignored")
    for source, block in company.integrations.configured().items():
        if not block.users:
            out.append(f"integrations.{source}.users is empty: no {source} user maps to a seat, so its "
                       "deliveries can name nobody")
    return out


def _never_binding(path: str, budget) -> list[str]:
    """A longer window capped at or below a shorter one leaves the shorter one unable to bind."""
    windows = list(budget.windows().items())
    out = []
    for (short, short_cap), (long, long_cap) in itertools.pairwise(windows):
        if long_cap <= short_cap:
            out.append(f"{path}.{short}: {short_cap} can never bind, because {path}.{long} "
                       f"({long_cap}) is reached first")
    return out
