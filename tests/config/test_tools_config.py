"""The company document's tools and turns (DESIGN.md, deliberate difference 4; the shape pinned in
examples/company.yaml): `tools.mcp`, `turns`, a seat's own `max_iter`, the `anthropic` provider
kind and the scripted kind's `tool_calls`. Every refusal names the field path."""
from __future__ import annotations

import pytest

from engine.config import load_company, parse_company
from tests.config.conftest import EXAMPLE_ENV, EXAMPLES, company_problems, company_text, refusal_at

SEATS = {"seats": [{"handle": "maya", "kind": "human", "role": "founder"},
                   {"handle": "alice", "kind": "agent", "role": "engineer"},
                   {"handle": "carol", "kind": "agent", "role": "pm"}]}


def stdio(**fields) -> dict:
    return {"name": "notes", "transport": "stdio", "command": ["python", "notes.py"], **fields}


def tools_text(*servers: dict, **changes) -> str:
    return company_text(org=SEATS, tools={"mcp": list(servers)}, **changes)


def test_the_bundled_example_declares_a_tool_server_turn_guards_and_a_scripted_tool_call():
    company = load_company(EXAMPLES / "company.yaml", env=EXAMPLE_ENV)
    [notes] = company.tools.mcp
    assert (notes.name, notes.transport, notes.command, notes.env) == \
        ("notes", "stdio", [".venv/bin/python", "examples/tools/notes.py"], {"NOTES_DIR": "var/notes"})
    assert (notes.seats, notes.roles, notes.startup_timeout_seconds, notes.call_timeout_seconds) == \
        (["alice", "bob", "carol"], None, 10, 30)
    turns = company.turns
    assert (turns.max_iter, turns.stall_repeats, turns.scheduled_timeout_seconds, turns.memory_tokens) == \
        (25, 3, 1800, 8000)
    assert company.max_iter_for(company.seat_by_handle("alice")) == 40
    assert company.max_iter_for(company.seat_by_handle("bob")) == 25
    [call] = company.providers.llm[0].tool_calls
    assert (call.server, call.tool, call.arguments) == ("notes", "append", {"text": "{trigger_summary}"})


def test_the_defaults_a_company_without_tools_or_turns_gets():
    company = parse_company(company_text(), env={})
    assert company.tools.mcp == []
    assert (company.turns.max_iter, company.turns.stall_repeats, company.turns.depth_cap,
            company.turns.scheduled_timeout_seconds, company.turns.memory_tokens) == (25, 3, 5, 1800, 8000)
    server = parse_company(tools_text(stdio()), env={}).tools.mcp[0]
    assert (server.startup_timeout_seconds, server.call_timeout_seconds, server.seats, server.roles) == (10, 30, None, None)


def test_an_http_server_takes_headers_with_references_and_never_shows_them():
    text = tools_text({"name": "tracker", "transport": "http", "url": "https://mcp.example.com/mcp",
                       "headers": {"Authorization": "Bearer ${TRACKER_MCP_TOKEN}"}})
    server = parse_company(text, env={"TRACKER_MCP_TOKEN": "tok-secret"}).tools.mcp[0]
    assert server.headers == {"Authorization": "Bearer tok-secret"}
    assert "tok-secret" not in repr(server)
    problems = company_problems(text)
    assert refusal_at(problems, "tools.mcp[0].headers.Authorization") == \
        "tools.mcp[0].headers.Authorization: ${TRACKER_MCP_TOKEN} is not set in the environment"


def test_an_anthropic_provider_takes_its_settings_and_defaults():
    llm = [{"name": "claude", "kind": "anthropic", "model": "m", "api_key": "${ANTHROPIC_API_KEY}"}]
    provider = parse_company(company_text(providers={"llm": llm}), env={"ANTHROPIC_API_KEY": "sk-ant"}).providers.llm[0]
    assert (provider.base_url, provider.api_key, provider.timeout_seconds, provider.max_retries) == \
        ("https://api.anthropic.com", "sk-ant", 60.0, 2)
    assert "sk-ant" not in repr(provider)
    bad = [{"name": "claude", "kind": "anthropic", "model": " ", "base_url": "api.anthropic.com"}]
    problems = company_problems(company_text(providers={"llm": bad}))
    assert refusal_at(problems, "providers.llm[0].base_url").endswith('got "api.anthropic.com"')
    assert refusal_at(problems, "providers.llm[0].model") == "providers.llm[0].model: empty: name the model to ask for"


@pytest.mark.parametrize("server, path, says", [
    ({"name": "notes", "transport": "stdio"}, "tools.mcp[0].command", "missing: a stdio server is a command to start"),
    (stdio(url="https://x.example/mcp"), "tools.mcp[0].url", "a stdio server is started, not dialled"),
    ({"name": "t", "transport": "http"}, "tools.mcp[0].url", "expected an http or https URL"),
    ({"name": "t", "transport": "http", "url": "ftp://x"}, "tools.mcp[0].url", 'got "ftp://x"'),
    ({"name": "t", "transport": "http", "url": "https://x/mcp", "command": ["x"]}, "tools.mcp[0].command",
     "an http server is dialled, not started"),
    (stdio(transport="sse"), "tools.mcp[0].transport", 'expected one of stdio, http, got "sse"'),
    (stdio(name="no__pe"), "tools.mcp[0].name", "1 to 32 letters, digits and '-'"),
    (stdio(name="x" * 33), "tools.mcp[0].name", "1 to 32 letters"),
    (stdio(seats=["maya"]), "tools.mcp[0].seats[0]", '"maya" is a human seat: tools are for agent seats'),
    (stdio(seats=["alice", "zed"]), "tools.mcp[0].seats[1]", '"zed" names no seat in org.seats'),
    (stdio(roles=["founder"]), "tools.mcp[0].roles[0]", '"founder" is the role of no agent seat'),
    (stdio(seats=["alice"], roles=["pm"]), "tools.mcp[0].roles", "give seats or roles, not both"),
    (stdio(startup_timeout_seconds=0), "tools.mcp[0].startup_timeout_seconds", "expected a number above 0"),
    (stdio(call_timeout_seconds="soon"), "tools.mcp[0].call_timeout_seconds", "expected a number above 0"),
    (stdio(magic=1), "tools.mcp[0].magic", "unknown field"),
])
def test_a_tool_server_entry_that_cannot_work_is_refused_naming_the_field(server, path, says):
    problem = refusal_at(company_problems(tools_text(server)), path)
    assert says in problem, problem


def test_a_tool_server_named_twice_is_refused():
    problems = company_problems(tools_text(stdio(), stdio()))
    assert refusal_at(problems, "tools.mcp[1].name") == 'tools.mcp[1].name: "notes" is already the name of tools.mcp[0]'


def test_a_scripted_tool_call_naming_no_server_is_refused():
    llm = [{"name": "local", "kind": "scripted", "tool_calls": [{"server": "notes", "tool": "append"},
                                                                 {"server": "wiki", "tool": "search"}]}]
    problems = company_problems(tools_text(stdio(), providers={"llm": llm}))
    assert refusal_at(problems, "providers.llm[0].tool_calls[1].server") == \
        'providers.llm[0].tool_calls[1].server: "wiki" names no server in tools.mcp (notes); declare it there ' \
        'or remove the call'
    assert not [p for p in problems if p.startswith("providers.llm[0].tool_calls[0]")]
    problems = company_problems(company_text(providers={"llm": [{"name": "l", "kind": "scripted",
                                                                 "tool_calls": [{"tool": "append"}]}]}))
    assert refusal_at(problems, "providers.llm[0].tool_calls[0].server") == \
        "providers.llm[0].tool_calls[0].server: missing: expected text"


@pytest.mark.parametrize("turns, path, says", [
    ({"max_iter": 0}, "turns.max_iter", "expected an integer from 1 to 1000"),
    ({"stall_repeats": 1}, "turns.stall_repeats", "expected an integer from 2 to 100"),
    ({"memory_tokens": 200_000}, "turns.memory_tokens", "one conversation's memory is one value"),
    ({"scheduled_timeout_seconds": -5}, "turns.scheduled_timeout_seconds", "expected an integer from 1"),
    ({"depth_cap": 99}, "turns.depth_cap", "expected an integer from 0 to 50"),
    ({"max_iterations": 5}, "turns.max_iterations", "did you mean max_iter?"),
])
def test_turn_settings_out_of_range_are_refused_naming_the_field(turns, path, says):
    assert says in refusal_at(company_problems(company_text(turns=turns)), path)


def test_max_iter_on_a_human_seat_is_refused_and_out_of_range_on_an_agent_too():
    org = {"seats": [{"handle": "maya", "kind": "human", "max_iter": 5}, {"handle": "alice", "kind": "agent"}]}
    assert refusal_at(company_problems(company_text(org=org)), "org.seats[0].max_iter") == \
        "org.seats[0].max_iter: maya is a human seat, which runs no turn; remove it"
    org = {"seats": [{"handle": "alice", "kind": "agent", "max_iter": 5000}]}
    assert "expected an integer from 1 to 1000" in refusal_at(company_problems(company_text(org=org)),
                                                              "org.seats[0].max_iter")


def test_a_reader_of_the_document_never_sees_a_tool_servers_literal_credentials():
    """`env` and `headers` values are secret fields of the schema: every literal is hidden (an
    env value that is no credential included -- the schema cannot tell, so it errs on the
    reader's side), and a lone `${VAR}` reference, which names no secret, is kept."""
    from engine.config.secretfields import redact_document as redact

    document = """tools:
  mcp:
    - name: notes
      env: {NOTES_DIR: "var/notes", API_TOKEN: "abc123", FROM_ENV: "${Y}"}
      headers: {Authorization: "Bearer ${TRACKER_MCP_TOKEN}"}
    - name: tracker
      transport: http
      headers: {Authorization: "Bearer literal-secret", X-Team: nimbus}
      env:
        SERVICE_KEY: s3cr3t
        REGION: eu
    - name: wiki
      headers:
        Authorization: Bearer zzz
      url: https://wiki.example/mcp
"""
    shown = redact(document)
    for secret in ("abc123", "literal-secret", "nimbus", "s3cr3t", "zzz", "var/notes", "REGION: eu"):
        assert secret not in shown
    for kept in ('FROM_ENV: "${Y}"', "url: https://wiki.example/mcp", "- name: wiki", "transport: http"):
        assert kept in shown
    assert shown.count('"[redacted]"') == 8
