"""The company document's cross-field refusals and its advisories.

Refusals: a seat named twice (seed 000, "Routing": a handle names one inbox), a
`reports_to` or a schedule or an integration user naming no seat, a schedule aimed at a
human (a human has no inbox), a token budget on a human seat (seed 002, "Token Budgets":
per seat means an agent seat's), a cron expression the scheduler could not fire, an
integration secret that is empty. Advisories: a company with no model provider (seed
000: valid, and its agents hold their mail until one is added), ceilings that can never
bind (seed 002: "the ceilings crewlet validate warns can never bind"), and the like.
"""
from __future__ import annotations

import itertools

from typing import Any
from urllib.parse import urlsplit

from engine.config.cron import cron_problem
from engine.config.errors import describe_value, field_path

_SECRET_FIELDS = ("webhook_secret", "signing_secret", "token")


def company_refusals(blocks: dict[str, Any]) -> list[str]:
    """Every cross-field refusal the decoded blocks earn, each `path: message`."""
    out: list[str] = []
    if "name" in blocks and not blocks["name"].strip():
        out.append("name: empty: a company needs a name (its agent ids are derived from it)")
    if blocks.get("providers") is not None:
        out += _provider_refusals(blocks["providers"].llm)
    org = blocks.get("org")
    seats = {s.handle: s for s in org.seats} if org is not None else None
    if org is not None:
        out += _seat_refusals(org.seats)
    schedules = blocks.get("schedules") or []
    for i, schedule in enumerate(schedules):
        if schedule is not None:  # None: an item refused on its own (engine.config.company._salvaged)
            out += _schedule_refusals(i, schedule, seats)
    out += _duplicates("schedules", "name", schedules)
    if blocks.get("integrations") is not None:
        out += _integration_refusals(blocks["integrations"], seats)
    return out


def _provider_refusals(llm: list) -> list[str]:
    out = _duplicates("providers.llm", "name", llm)
    for i, provider in enumerate(llm):
        if not provider.name.strip():
            out.append(f"providers.llm[{i}].name: empty: a provider needs a name")
        if provider.kind == "openai":
            parts = urlsplit(provider.base_url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                out.append(f"providers.llm[{i}].base_url: expected an http or https URL such as "
                           f"https://api.example.com/v1, got {describe_value(provider.base_url)}")
            if not provider.model.strip():
                out.append(f"providers.llm[{i}].model: empty: name the model to ask for")
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
