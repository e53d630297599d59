"""The company document, `company.yaml` (Tier B: hot-reloadable, stored as revisions).

DESIGN.md, "Configuration": name, timezone, providers, org (seats: handle, kind
agent|human, role, title, reports_to, placement, max_iter), integrations, the notification
knobs (seed 000, "Inbox Batching & Coalescing"), schedules and token budgets (seed 002,
"Token Budgets"), the tool servers the agents call (`tools.mcp`; DESIGN.md, deliberate
difference 4) and the turn guards and memory (`turns`; seed 000, `turn.guard_breach`). The
cross-field refusals and the advisories are in `company_rules.py`.

Agent ids are derived, never assigned (seed 000, "Routing"): a uuid5 over the company
name and the seat handle, so every node computes the same id for the same seat and can
invert it with no database and no live instance.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
import zoneinfo
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PrivateAttr

from engine.config.document import decode_document, read_file, read_yaml
from engine.config.errors import ConfigInvalid, describe_value
from engine.config.fields import Block, Expect, Handle, Secret, Text, choice, integer, number, refuse
from engine.queue.limits import MAX_BATCH_CEILING, MAX_LINGER_SECONDS

# The namespace every agent id is derived in: uuid5(AGENT_ID_NAMESPACE, "<company>/<handle>").
# Fixed for ever: changing it would give every seat of every company a new id. ("/" cannot
# be in a handle, so the name splits at its last "/" back into the two.)
AGENT_ID_NAMESPACE = uuid.UUID("5b0c6a4e-8f3d-5c1a-9e27-63a1c0d4b2f8")


def _check_timezone(value: Any) -> str:
    if isinstance(value, str) and value.strip():
        try:
            zoneinfo.ZoneInfo(str(value))
            return str(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            pass
    raise refuse(f"expected an IANA time zone such as UTC or Europe/Berlin, got {describe_value(value)}")


Timezone = Annotated[str, BeforeValidator(_check_timezone), Expect("an IANA time zone such as UTC")]


class ScriptedToolCall(Block):
    """A tool call the scripted model makes before it replies: a tool of a `tools.mcp` server,
    with arguments whose text may carry the reply's placeholders (`{trigger_summary}`)."""

    server: Text
    tool: Text
    arguments: dict[Text, Any] = Field(default_factory=dict)


class Scripted(Block):
    """A deterministic, offline provider (DESIGN.md, deviation 4): for demos and tests."""

    name: Text
    kind: Literal["scripted"]
    delay_seconds: number(lo=0) = 0.0
    reply: Text = "On it. ({trigger_summary})"  # a template the turn engine fills
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)  # one round of them, then the reply


class OpenAI(Block):
    """Any OpenAI-compatible chat-completions endpoint (the official `openai` SDK)."""

    name: Text
    kind: Literal["openai"]
    base_url: Text
    model: Text
    api_key: Secret | None = Field(default=None, repr=False)
    timeout_seconds: number(above=0) = 60.0
    max_retries: integer(0, 10) = 2


class Anthropic(Block):
    """Anthropic's Messages API (the official `anthropic` SDK: `x-api-key`, `anthropic-version`)."""

    name: Text
    kind: Literal["anthropic"]
    base_url: Text = "https://api.anthropic.com"
    model: Text
    api_key: Secret | None = Field(default=None, repr=False)
    timeout_seconds: number(above=0) = 60.0
    max_retries: integer(0, 10) = 2


Provider = Annotated[Scripted | OpenAI | Anthropic, Field(discriminator="kind")]


class Providers(Block):
    """`providers`: an empty or missing block is a valid company with no model provider."""

    llm: list[Provider] = Field(default_factory=list)


ZERO_CEILING = "0 is refused rather than read as unlimited: leave the window out to leave it uncapped"


class TokenBudget(Block):
    """Ceilings per calendar window on the company's clock; an absent window is uncapped."""

    day: integer(1, zero=ZERO_CEILING) | None = None
    week: integer(1, zero=ZERO_CEILING) | None = None
    month: integer(1, zero=ZERO_CEILING) | None = None

    def windows(self) -> dict[str, int]:
        """The capped windows, {"day": ceiling, ...}, smallest window first."""
        return {w: c for w in ("day", "week", "month") if (c := getattr(self, w)) is not None}


MAX_ITER_CEILING = 1000  # rounds in one turn: past this a turn is a loop, whatever it is doing


class McpServer(Block):
    """One tool server of `tools.mcp` (the Model Context Protocol): a child the node starts over
    stdio, or an endpoint it dials over streamable HTTP. `seats` or `roles` say which agent seats
    may use it (neither: every agent seat). Its tools reach the model as `<name>__<tool>`."""

    name: Text
    transport: choice("stdio", "http")
    command: list[Text] | None = None
    env: dict[Text, Secret] = Field(default_factory=dict, repr=False)
    url: Text | None = None
    headers: dict[Text, Secret] = Field(default_factory=dict, repr=False)
    seats: list[Text] | None = None
    roles: list[Text] | None = None
    # seed 002: "each bounded by its own startup_timeout_seconds, for its start and again for its
    # first tool listing, with no ceiling on the setting"
    startup_timeout_seconds: number(above=0) = 10.0
    call_timeout_seconds: number(above=0) = 30.0

    def serves(self, seat: "Seat") -> bool:
        """Whether `seat` may use this server's tools."""
        if not seat.is_agent:
            return False
        if self.seats is not None:
            return seat.handle in self.seats
        if self.roles is not None:
            return (seat.role or "") in self.roles
        return True


class Tools(Block):
    """`tools`: the tool servers the company's agents call."""

    mcp: list[McpServer] = Field(default_factory=list)


# 100,000 tokens of memory is about 400 KB of text: one coordination value must stay well
# inside the broker's 1 MB message.
MEMORY_TOKENS_CEILING = 100_000


class Turns(Block):
    """`turns`: the guards every turn runs under (seed 000, `turn.guard_breach`: stall, max_iter,
    depth_cap, scheduled_timeout) and how much of a conversation's earlier turns a turn is shown."""

    max_iter: integer(1, MAX_ITER_CEILING) = 25
    stall_repeats: integer(2, 100) = 3
    depth_cap: integer(0, 50) = 5          # the delegation depth a turn may be woken at
    scheduled_timeout_seconds: integer(1, 7 * 24 * 3600) = 1800
    memory_tokens: integer(0, MEMORY_TOKENS_CEILING,
                           because="one conversation's memory is one value in the coordination store") = 8000


class Placement(Block):
    """Where a seat may run: pinned to a node, and/or on a node carrying every label."""

    node: Text | None = None
    labels: list[Text] = Field(default_factory=list)


class Seat(Block):
    """One seat of the org chart. A handle is one token of the seat's inbox subject."""

    handle: Handle
    kind: choice("agent", "human")
    role: Text | None = None
    title: Text | None = None
    reports_to: Text | None = None
    placement: Placement | None = None
    token_budget: TokenBudget = Field(default_factory=TokenBudget)
    max_iter: integer(1, MAX_ITER_CEILING) | None = None  # None: turns.max_iter

    @property
    def is_agent(self) -> bool:
        return self.kind == "agent"


class Org(Block):
    seats: list[Seat] = Field(default_factory=list)


Users = dict[Text, Text]  # the source's user id -> a seat handle


class GitHub(Block):
    webhook_secret: Secret = Field(repr=False)
    users: Users = Field(default_factory=dict)


class Slack(Block):
    signing_secret: Secret = Field(repr=False)
    users: Users = Field(default_factory=dict)


class GitLab(Block):
    token: Secret = Field(repr=False)
    users: Users = Field(default_factory=dict)


class Jira(Block):
    webhook_secret: Secret = Field(repr=False)
    users: Users = Field(default_factory=dict)


class Mattermost(Block):
    token: Secret = Field(repr=False)
    users: Users = Field(default_factory=dict)


class Integrations(Block):
    """`integrations`: one block per source, None when the company does not use it."""

    github: GitHub | None = None
    slack: Slack | None = None
    gitlab: GitLab | None = None
    jira: Jira | None = None
    mattermost: Mattermost | None = None

    def configured(self) -> dict[str, Any]:
        """{source name: its block} for the sources the company configures."""
        return {name: block for name in type(self).model_fields if (block := getattr(self, name)) is not None}


class Schedule(Block):
    """A task assigned to an agent seat's inbox on a cron schedule, on the company's clock."""

    name: Text
    seat: Text
    cron: Text
    task: Text


class Company(Block):
    """A decoded, validated company document."""

    name: Text
    timezone: Timezone = "UTC"
    providers: Providers = Field(default_factory=Providers)
    org: Org = Field(default_factory=Org)
    integrations: Integrations = Field(default_factory=Integrations)
    notification_coalesce_window_seconds: integer(
        0, MAX_LINGER_SECONDS, because="the linger cap: a drain holds its first message unworked for the whole linger"
    ) = 0
    notification_coalesce_max_batch: integer(
        1, MAX_BATCH_CEILING, because="the digest's ceiling: a trigger is re-sent on every round of a turn"
    ) = 20
    notification_rate_limit: integer(0) = 0  # notifications per seat per second; 0 is off
    schedules: list[Schedule] = Field(default_factory=list)
    token_budget: TokenBudget = Field(default_factory=TokenBudget)
    tools: Tools = Field(default_factory=Tools)
    turns: Turns = Field(default_factory=Turns)
    _source_text: str | None = PrivateAttr(default=None)
    _by_handle: dict[str, Seat] = PrivateAttr(default_factory=dict)
    _by_id: dict[uuid.UUID, Seat] = PrivateAttr(default_factory=dict)

    def model_post_init(self, _context: Any) -> None:
        self._by_handle = {seat.handle: seat for seat in self.org.seats}
        self._by_id = {self.agent_id_for(seat.handle): seat for seat in self.org.seats}

    @property
    def source_text(self) -> str | None:
        """The document as written (references unexpanded), when it was parsed from text."""
        return self._source_text

    @property
    def tz(self) -> zoneinfo.ZoneInfo:
        """The company's clock: budget windows and schedules are cut on it."""
        return zoneinfo.ZoneInfo(self.timezone)

    def agent_id_for(self, handle: str) -> uuid.UUID:
        """The seat's agent id: uuid5 over the company name and the handle (seat or not)."""
        return uuid.uuid5(AGENT_ID_NAMESPACE, f"{self.name}/{handle}")

    def seat_by_agent_id(self, agent_id: uuid.UUID | str) -> Seat | None:
        """The seat whose derived id is agent_id, else None (also for text that is no UUID)."""
        try:
            key = agent_id if isinstance(agent_id, uuid.UUID) else uuid.UUID(str(agent_id))
        except ValueError:
            return None
        return self._by_id.get(key)

    def seat_by_handle(self, handle: str) -> Seat | None:
        return self._by_handle.get(handle)

    def max_iter_for(self, seat: Seat) -> int:
        """The rounds one of the seat's turns may take: its own `max_iter`, else `turns.max_iter`."""
        return seat.max_iter if seat.max_iter is not None else self.turns.max_iter

    def agent_seats(self) -> list[Seat]:
        return [s for s in self.org.seats if s.kind == "agent"]

    def human_seats(self) -> list[Seat]:
        return [s for s in self.org.seats if s.kind == "human"]

    def canonical_json(self) -> str:
        """The decoded document as canonical JSON: defaults filled, keys sorted, no spaces."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def digest(self) -> str:
        """sha256 (hex) of `canonical_json()`: two files meaning the same thing share one."""
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()


def parse_company(text: str, env: Mapping[str, str] | None = None, source: str = "company.yaml",
                  references=None) -> Company:
    """Decode and validate a company document; ConfigError listing every refusal.

    `references` limits which `${VAR}` may expand where (a document sent over the API:
    `secretfields.api_references`); None expands any, as the file given at boot does."""
    from engine.config.company_rules import company_refusals
    from engine.config.secretfields import secret_alias_refusals

    decoded = decode_document(Company, read_yaml(text, source), os.environ if env is None else env, references)
    problems = decoded.kept_problems(company_refusals(_salvaged(decoded)) + secret_alias_refusals(text, Company))
    if problems or not decoded.complete:
        raise ConfigInvalid(problems)
    company = Company.model_validate(decoded.blocks)
    company._source_text = text
    return company


def _salvaged(decoded) -> dict[str, Any]:
    """The decoded blocks, a refused `org` or `schedules` block stood in for by its items decoded
    one by one (crewlet_validate reports every problem in one pass: a seat refused for its
    `kind` is still a seat that others report to). A seat that does not decode stands in with
    what can be read of its handle, kind and reports_to; a schedule that does not decode is
    skipped by the rules (its own problems are already reported)."""
    from engine.config.document import salvage_items

    blocks = dict(decoded.blocks)
    raw_org = decoded.expanded.get("org")
    if "org" not in blocks and isinstance(raw_org, dict):
        blocks["org"] = Org.model_construct(seats=salvage_items(Seat, raw_org.get("seats"), _seat_stand_in))
    if "schedules" not in blocks:
        blocks["schedules"] = salvage_items(Schedule, decoded.expanded.get("schedules"))
    return blocks


def _seat_stand_in(raw: Any) -> Seat:
    item = raw if isinstance(raw, dict) else {}

    def text(name: str) -> str | None:
        value = item.get(name)
        return value if isinstance(value, str) else None

    kind = text("kind") if text("kind") in ("agent", "human") else None
    return Seat.model_construct(handle=text("handle") or "", kind=kind, role=None, title=None,
                                reports_to=text("reports_to"), placement=None, token_budget=TokenBudget())


def load_company(path: str | os.PathLike, env: Mapping[str, str] | None = None) -> Company:
    """Read and validate the company document at path; ConfigError naming the path or fields."""
    return parse_company(read_file(path), env=env, source=os.fspath(path))
