"""engine.config.secretfields and yamlbudget on their own: the schema's secret fields, the one
redaction of a parsed document in every YAML style, the reference rule for a document sent
over the API, and the depth and alias budget."""
from __future__ import annotations

import pytest

from engine.config import ConfigError, parse_company
from engine.config.company import Company
from engine.config.secretfields import api_references, redact_document, secret_at
from engine.config.yamlbudget import MAX_DEPTH

HEAD = "name: nimbus\norg:\n  seats:\n    - {handle: alice, kind: agent, title: Engineer}\n"


@pytest.mark.parametrize("block, literal", [
    ("integrations:\n  github: {webhook_secret: flow-literal, users: {a: alice}}\n", "flow-literal"),
    ('integrations:\n  "slack":\n    "signing_secret": \'quoted-literal\'\n', "quoted-literal"),
    ("integrations:\n  gitlab:\n    token: |\n      block-literal\n    users: {}\n", "block-literal"),
    ("integrations:\n  mattermost:\n    token: >-\n      folded-literal\n", "folded-literal"),
    ("integrations:\n  jira:\n    webhook_secret: &s anchored-literal\n", "anchored-literal"),
    ("integrations:\n  jira:\n    ? webhook_secret\n    : explicit-key-literal\n", "explicit-key-literal"),
    ("base: &b {webhook_secret: merged-literal}\nintegrations:\n  github:\n    <<: *b\n", "merged-literal"),
    ("providers:\n  llm:\n    - {name: r, kind: openai, base_url: 'http://x', model: m, api_key: sk-literal}\n", "sk-literal"),
])
def test_every_yaml_spelling_of_a_secret_is_redacted(block, literal):
    shown = redact_document(HEAD + block)
    assert literal not in shown
    assert '"[redacted]"' in shown
    assert "title: Engineer" in shown  # the rest, as written


def test_a_lone_reference_is_kept_and_anything_else_in_a_secret_field_is_not():
    shown = redact_document(HEAD + 'integrations:\n  github: {webhook_secret: "${GH}"}\n'
                                   '  slack: {signing_secret: "${SL:-fallback-literal}"}\n')
    assert "${GH}" in shown and "fallback-literal" not in shown


def test_a_key_the_schema_does_not_know_is_redacted_and_comments_survive():
    shown = redact_document("# the company\nname: nimbus  # its name\nlegacy_password: hunter2\n")
    assert "hunter2" not in shown and "# the company" in shown and "# its name" in shown


def test_a_document_that_cannot_be_read_is_not_shown():
    assert "webhook_secret" not in redact_document("integrations: {github: {webhook_secret: x\n")


def test_secret_fields_come_from_the_schema():
    assert secret_at(Company, ("integrations", "github", "webhook_secret"))
    assert secret_at(Company, ("providers", "llm", 0, "api_key"))
    assert not secret_at(Company, ("org", "seats", 0, "title"))
    assert not secret_at(Company, ("integrations", "github", "users", "octo"))


def test_an_alias_of_a_secret_into_a_shown_field_is_refused_naming_both():
    text = ("name: nimbus\nintegrations:\n  github: {webhook_secret: &s leaked-literal}\n"
            "org:\n  seats:\n    - {handle: alice, kind: agent, title: *s}\n")
    with pytest.raises(ConfigError) as refused:
        parse_company(text)
    assert "org.seats[0].title: an alias of integrations.github.webhook_secret" in str(refused.value)


def test_references_over_the_api_expand_only_in_secret_fields_and_never_a_node_credential():
    policy = api_references(Company, ["the-key-material-of-this-node-0123"])
    env = {"GH": "gh-secret", "TEAM": "Platform", "SNEAKY": "the-key-material-of-this-node-0123"}
    company = parse_company(HEAD + 'integrations:\n  github: {webhook_secret: "${GH}"}\n', env=env, references=policy)
    assert company.integrations.github.webhook_secret == "gh-secret"
    for text, refusal in [
        (HEAD.replace("Engineer", "\"${TEAM}\""), "org.seats[0].title: ${TEAM} is not expanded"),
        (HEAD + 'integrations:\n  github: {webhook_secret: "${SNEAKY}"}\n', "${SNEAKY} is one of this node's own"),
        (HEAD + 'integrations:\n  github: {webhook_secret: "${CREWLET_SECRET_KEY_X}"}\n', "${CREWLET_SECRET_KEY_X} is one"),
    ]:
        with pytest.raises(ConfigError) as refused:
            parse_company(text, env=env, references=policy)
        assert refusal in str(refused.value)
    # Without a policy (the file given at boot) a reference expands anywhere, as before.
    assert parse_company(HEAD.replace("Engineer", "\"${TEAM}\""), env=env).org.seats[0].title == "Platform"


def test_the_yaml_budget_refuses_by_name():
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_company("name: x\nextra: " + "[" * 1000)
    laughs = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    with pytest.raises(ConfigError, match="the alias budget"):
        parse_company(laughs)
    with pytest.raises(ConfigError, match="recursive"):
        parse_company("name: x\nschedules: &s [*s]\n")
