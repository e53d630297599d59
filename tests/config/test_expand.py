"""`${VAR}` references (seed 002, "Every node embeds a member of one cluster": Tier A
expands references before it decodes; a number or a boolean takes only a whole one)."""
from __future__ import annotations

from engine.config import parse_node_config
from engine.config.expand import EmbeddedReferences, WholeReference, expand_references
from tests.config.conftest import node_problems, node_text, refusal_at


def test_a_reference_expands_anywhere_in_a_text_field():
    tree, expansion = expand_references({"path": "/var/log/${NODE}.log"}, {"NODE": "n7"})
    assert tree == {"path": "/var/log/n7.log"}
    assert isinstance(tree["path"], EmbeddedReferences)
    assert expansion.problems == []


def test_a_default_is_used_when_the_variable_is_unset_or_empty():
    tree, _ = expand_references({"a": "${X:-one}", "b": "${Y:-two}"}, {"Y": ""})
    assert tree == {"a": "one", "b": "two"}
    assert isinstance(tree["a"], WholeReference)


def test_a_doubled_dollar_is_a_literal_reference():
    tree, expansion = expand_references({"a": "$${HOME}"}, {})
    assert tree == {"a": "${HOME}"} and expansion.problems == []


def test_mapping_keys_are_not_expanded():
    tree, _ = expand_references({"${K}": "v"}, {"K": "x"})
    assert tree == {"${K}": "v"}


def test_an_unset_variable_is_refused_naming_the_field():
    problems = node_problems(node_text(node={"id": "${CREWLET_NODE_ID}"}))
    assert refusal_at(problems, "node.id") == "node.id: ${CREWLET_NODE_ID} is not set in the environment"


def test_a_malformed_reference_is_refused_naming_the_field():
    problems = node_problems(node_text(store={"path": "var/${1BAD}.db"}))
    assert "is not a reference" in refusal_at(problems, "store.path")
    problems = node_problems(node_text(store={"path": "var/${OPEN.db"}))
    assert "no closing" in refusal_at(problems, "store.path")


def test_a_whole_reference_in_a_number_is_read_as_if_written_there():
    text = node_text().replace("port: 0", "port: ${API_PORT}") + "stream_extra: 1\n"
    text = text.replace("stream_extra: 1\n", "")
    text = text.replace("api:\n  port: ${API_PORT}", "api:\n  port: ${API_PORT}\n  external_url: http://127.0.0.1:9000"
                        "\n  auth: {admin: serve, tokens: [{id: a, token: t0k3n-value-aaaaaaaa, grants: [admin]}]}")
    cfg = parse_node_config(text, env={"API_PORT": "9000"})
    assert cfg.api.port == 9000


def test_a_whole_reference_in_a_boolean_is_read_as_if_written_there():
    text = node_text(logging={"stderr": "${STDERR:-true}"})
    assert parse_node_config(text, env={}).logging.stderr is True


def test_a_reference_inside_a_number_is_refused():
    text = node_text(stream={"replicas": "1${X}"})
    problem = refusal_at(node_problems(text, {"X": ""}), "stream.replicas")
    assert "must be the whole value" in problem


def test_a_reference_that_resolves_to_text_in_a_number_names_what_was_expected():
    text = node_text(stream={"cluster": {"name": "c", "port": "${ROUTE_PORT}"}}, coordination={"type": "embedded-kv"})
    problem = refusal_at(node_problems(text, {"ROUTE_PORT": "abc"}), "stream.cluster.port")
    assert problem == 'stream.cluster.port: expected an integer from 1 to 65535, got "abc" (from ${ROUTE_PORT})'


def test_an_unset_secret_is_refused_once_not_also_as_too_short():
    text = node_text(secrets={"active_key_id": "k1", "keys": [{"id": "k1", "material": "${KEY_K1}"}]})
    problems = node_problems(text)
    assert problems == ["secrets.keys[0].material: ${KEY_K1} is not set in the environment"]


def test_a_whole_reference_that_resolves_to_nothing_leaves_an_optional_field_unset():
    cfg = parse_node_config(node_text(stream={"store_max_bytes": "${STORE_MAX_BYTES:-}"}, node={"max_concurrent": "${MC}"}),
                            env={"MC": ""})
    assert cfg.stream.store_max_bytes is None and cfg.node.max_concurrent == 32
