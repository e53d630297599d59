"""The company document, `company.yaml` (DESIGN.md, "Configuration"; seed 000, "Inbox
Batching & Coalescing" and "Routing"; seed 002, "Token Budgets")."""
from __future__ import annotations

import uuid

import pytest

from engine.config import AGENT_ID_NAMESPACE, ConfigError, load_company, parse_company
from tests.config.conftest import EXAMPLE_ENV, EXAMPLES, REMOVE, company_problems, company_text, refusal_at


def seats(*extra):
    return {"seats": [{"handle": "maya", "kind": "human"}, {"handle": "alice", "kind": "agent"}, *extra]}


def test_the_bundled_example_loads_with_its_variables_set():
    company = load_company(EXAMPLES / "company.yaml", env=EXAMPLE_ENV)
    assert company.name == "nimbus" and company.timezone == "UTC"
    assert [p.kind for p in company.providers.llm] == ["scripted"]
    assert [s.handle for s in company.agent_seats()] == ["alice", "bob", "carol"]
    assert [s.handle for s in company.human_seats()] == ["maya"]
    assert company.seat_by_handle("alice").reports_to == "maya"
    assert company.integrations.github.users["octo-alice"] == "alice"
    assert company.integrations.github.webhook_secret == "gh-secret"
    assert (company.notification_coalesce_window_seconds, company.notification_coalesce_max_batch,
            company.notification_rate_limit) == (0, 20, 0)
    assert company.schedules[0].seat == "carol"
    assert company.token_budget.day == 3_000_000 and company.token_budget.week is None
    assert company.source_text.startswith("# The company document")


def test_the_bundled_example_names_each_missing_variable():
    with pytest.raises(ConfigError) as info:
        load_company(EXAMPLES / "company.yaml", env={})
    assert info.value.problems[0] == \
        "integrations.github.webhook_secret: ${GITHUB_WEBHOOK_SECRET} is not set in the environment"
    assert len(info.value.problems) == 5


@pytest.mark.parametrize("providers", ["", "providers:\n", "providers: {}\n", "providers: {llm: []}\n", "providers: {llm:}\n"])
def test_a_company_with_no_provider_is_valid(providers):
    company = parse_company(company_text(providers=REMOVE) + providers, env={})
    assert company.providers.llm == []


def test_an_openai_provider_takes_its_settings_and_defaults():
    llm = [{"name": "main", "kind": "openai", "base_url": "https://api.example.com/v1", "model": "m",
            "api_key": "${OPENAI_API_KEY}"}]
    provider = parse_company(company_text(providers={"llm": llm}), env={"OPENAI_API_KEY": "sk-1"}).providers.llm[0]
    assert (provider.api_key, provider.timeout_seconds, provider.max_retries) == ("sk-1", 60.0, 2)
    assert "sk-1" not in repr(provider)


def test_a_provider_of_an_unknown_kind_or_bad_settings_is_refused():
    llm = [{"name": "a", "kind": "magic"}, {"name": "b", "kind": "scripted", "delay_seconds": -1},
           {"name": "c", "kind": "openai", "model": "m"}]
    problems = company_problems(company_text(providers={"llm": llm}))
    assert refusal_at(problems, "providers.llm[0].kind") == \
        'providers.llm[0].kind: expected one of scripted, openai, anthropic, got "magic"'
    assert "at least 0" in refusal_at(problems, "providers.llm[1].delay_seconds")
    assert refusal_at(problems, "providers.llm[2].base_url") == "providers.llm[2].base_url: missing: expected text"


def test_a_timezone_is_checked_against_the_zone_database():
    assert parse_company(company_text(timezone="Europe/Berlin"), env={}).tz.key == "Europe/Berlin"
    assert "IANA time zone" in refusal_at(company_problems(company_text(timezone="Mars/Base")), "timezone")


@pytest.mark.parametrize("handle", ["Alice", "al.ice", "al ice", "", "al*"])
def test_a_handle_that_cannot_be_a_subject_token_is_refused_naming_it(handle):
    problems = company_problems(company_text(org=seats({"handle": handle, "kind": "agent"})))
    problem = refusal_at(problems, "org.seats[2].handle")
    assert f'"{handle}" cannot be a NATS subject token' in problem


def test_a_handle_used_twice_is_refused():
    problems = company_problems(company_text(org=seats({"handle": "alice", "kind": "agent"})))
    assert refusal_at(problems, "org.seats[2].handle") == 'org.seats[2].handle: "alice" is already the handle of org.seats[1]'


def test_a_seat_kind_is_agent_or_human():
    problems = company_problems(company_text(org=seats({"handle": "r2", "kind": "robot"})))
    assert refusal_at(problems, "org.seats[2].kind") == 'org.seats[2].kind: expected one of agent, human, got "robot"'
    problems = company_problems(company_text(org=seats({"handle": "r2"})))
    assert refusal_at(problems, "org.seats[2].kind") == "org.seats[2].kind: missing: expected one of agent, human"


def test_reports_to_naming_no_seat_is_refused():
    problems = company_problems(company_text(org=seats({"handle": "bob", "kind": "agent", "reports_to": "mya"})))
    assert refusal_at(problems, "org.seats[2].reports_to") == 'org.seats[2].reports_to: "mya" names no seat in org.seats'


def test_a_reporting_cycle_is_refused():
    org = {"seats": [{"handle": "a", "kind": "agent", "reports_to": "b"}, {"handle": "b", "kind": "agent", "reports_to": "a"}]}
    assert "a -> b -> a" in refusal_at(company_problems(company_text(org=org)), "org.seats[0].reports_to")


def test_a_schedule_naming_an_unknown_or_human_seat_is_refused():
    schedules = [{"name": "s1", "seat": "ghost", "cron": "0 9 * * 1-5", "task": "t"},
                 {"name": "s2", "seat": "maya", "cron": "0 9 * * 1-5", "task": "t"}]
    problems = company_problems(company_text(schedules=schedules))
    assert refusal_at(problems, "schedules[0].seat") == 'schedules[0].seat: "ghost" names no seat in org.seats'
    assert "is a human seat" in refusal_at(problems, "schedules[1].seat")


@pytest.mark.parametrize("cron,names", [("61 * * * *", "the minute field '61'"), ("* * *", "got 3 fields"),
                                        ("0 9 * * mon-fry", "the day-of-week field 'mon-fry'"),
                                        ("*/0 * * * *", "the minute field '*/0'"), ("0 9 5-1 * *", "the day-of-month field '5-1'"),
                                        ("0 25 * * *", "the hour field '25'"), ("@reboot", "@reboot has no due time"),
                                        ("61 * * * * *", "the second field '61'")])
def test_a_cron_the_scheduler_could_not_fire_is_refused_naming_the_field(cron, names):
    schedules = [{"name": "s", "seat": "alice", "cron": cron, "task": "t"}]
    assert names in refusal_at(company_problems(company_text(schedules=schedules)), "schedules[0].cron")


def test_an_unknown_timezone_is_refused_and_no_schedule_is_read_on_it():
    schedules = [{"name": "s", "seat": "alice", "cron": "0 9 * * *", "task": "t"}]
    assert "IANA time zone" in refusal_at(company_problems(company_text(timezone="Europe/Atlantis", schedules=schedules)),
                                          "timezone")


@pytest.mark.parametrize("cron", ["0 9 * * 1-5", "*/15 * * * *", "0 0 1 jan,jul *", "@daily", "30 8 * * MON-FRI",
                                  "*/2 * * * * *", "0 0 L * *"])
def test_a_cron_in_the_usual_spellings_is_accepted(cron):
    company = parse_company(company_text(schedules=[{"name": "s", "seat": "alice", "cron": cron, "task": "t"}]), env={})
    assert [(s.name, s.seat, s.cron, s.task) for s in company.schedules] == [("s", "alice", cron, "t")]


@pytest.mark.parametrize("field,value,expected", [
    ("notification_coalesce_window_seconds", 61, "an integer from 0 to 60"),
    ("notification_coalesce_window_seconds", -1, "an integer from 0 to 60"),
    ("notification_coalesce_max_batch", 0, "an integer from 1 to 100"),
    ("notification_coalesce_max_batch", 101, "an integer from 1 to 100"),
    ("notification_rate_limit", -1, "an integer of at least 0"),
])
def test_a_notification_knob_out_of_range_is_refused(field, value, expected):
    problem = refusal_at(company_problems(company_text(**{field: value})), field)
    assert problem.startswith(f"{field}: expected {expected}, got {value}")


def test_the_notification_knobs_accept_their_whole_range():
    company = parse_company(company_text(notification_coalesce_window_seconds=60, notification_coalesce_max_batch=100,
                                         notification_rate_limit=5), env={})
    assert (company.notification_coalesce_window_seconds, company.notification_coalesce_max_batch) == (60, 100)


def test_token_budgets_are_windows_and_a_zero_ceiling_is_refused():
    company = parse_company(company_text(token_budget={"day": 10, "month": 100},
                                         org=seats({"handle": "bob", "kind": "agent", "token_budget": {"week": 5}})), env={})
    assert company.token_budget.windows() == {"day": 10, "month": 100}
    assert company.seat_by_handle("bob").token_budget.week == 5
    problem = refusal_at(company_problems(company_text(token_budget={"day": 0})), "token_budget.day")
    assert "0 is refused rather than read as unlimited" in problem
    assert "unknown field" in refusal_at(company_problems(company_text(token_budget={"hour": 5})), "token_budget.hour")


def test_a_token_budget_on_a_human_seat_is_refused():
    org = {"seats": [{"handle": "maya", "kind": "human", "token_budget": {"day": 5}}]}
    assert "human seat" in refusal_at(company_problems(company_text(org=org)), "org.seats[0].token_budget")


def test_an_integration_user_naming_no_seat_or_an_empty_secret_is_refused():
    integrations = {"github": {"webhook_secret": "", "users": {"octo-x": "nobody"}},
                    "jira": {"webhook_secret": "s", "users": {"x@acme.example": "ghost"}}}
    problems = company_problems(company_text(integrations=integrations))
    assert refusal_at(problems, "integrations.github.users.octo-x") == \
        'integrations.github.users.octo-x: "nobody" names no seat in org.seats'
    refusal_at(problems, 'integrations.jira.users["x@acme.example"]')
    assert "empty" in refusal_at(problems, "integrations.github.webhook_secret")


def test_an_unknown_integration_or_key_is_refused_by_name():
    problems = company_problems(company_text(integrations={"slak": {}}, orgg={}))
    assert "did you mean slack?" in refusal_at(problems, "integrations.slak")
    assert "did you mean org?" in refusal_at(problems, "orgg")


def test_a_missing_name_is_refused():
    assert refusal_at(company_problems(company_text(name=REMOVE)), "name") == "name: missing: expected text"


def test_agent_ids_are_derived_from_the_company_name_and_handle():
    company = parse_company(company_text(), env={})
    alice = company.agent_id_for("alice")
    # Pinned: a changed namespace or spelling would give every seat of every company a new id.
    assert AGENT_ID_NAMESPACE == uuid.UUID("5b0c6a4e-8f3d-5c1a-9e27-63a1c0d4b2f8")
    assert alice == uuid.UUID("e26030f7-4d64-5477-a48e-7d56c177661e")
    assert alice == parse_company(company_text(), env={}).agent_id_for("alice")
    assert alice.version == 5 and alice != company.agent_id_for("maya")


def test_an_agent_id_inverts_to_its_seat_as_uuid_or_text():
    company = parse_company(company_text(), env={})
    alice = company.agent_id_for("alice")
    assert company.seat_by_agent_id(alice).handle == "alice"
    assert company.seat_by_agent_id(str(alice)).handle == "alice"
    assert company.seat_by_agent_id(uuid.uuid4()) is None and company.seat_by_agent_id("not-a-uuid") is None
    assert company.seat_by_handle("nobody") is None


def test_another_company_name_gives_another_agent_id():
    ours = parse_company(company_text(), env={}).agent_id_for("alice")
    theirs = parse_company(company_text(name="globex"), env={}).agent_id_for("alice")
    assert ours != theirs


def test_two_files_meaning_the_same_thing_share_one_digest():
    terse = parse_company(company_text(), env={})
    spelled_out = parse_company(company_text(timezone="UTC", notification_coalesce_max_batch=20,
                                             integrations={}, schedules=[]) + "# a comment\n", env={})
    assert terse.digest() == spelled_out.digest()
    assert terse.digest() != parse_company(company_text(notification_rate_limit=3), env={}).digest()
    assert len(terse.digest()) == 64


def test_every_refusal_is_reported_at_once():
    problems = company_problems(company_text(timezone="Nowhere", notification_coalesce_window_seconds=600,
                                             schedules=[{"name": "s", "seat": "ghost", "cron": "@daily", "task": "t"}],
                                             org=seats({"hande": "bob", "kind": "agent"})))
    refusal_at(problems, "timezone")
    refusal_at(problems, "notification_coalesce_window_seconds")
    assert "did you mean handle?" in refusal_at(problems, "org.seats[2].hande")
