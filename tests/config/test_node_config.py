"""Tier A, `crewlet.yaml` (seed 002, "Deployment"): what it accepts, its defaults, and
every refusal naming its field."""
from __future__ import annotations

import base64
import socket

import pytest

from engine.config import ConfigError, load_node_config, parse_node_config
from engine.config.keyring import Key, Keyring
from tests.config.conftest import EXAMPLE_ENV, EXAMPLES, KEY, REMOVE, node_problems, node_text, refusal_at

CLUSTER = {"name": "crewlet", "port": 6222, "host": "10.0.0.11",
           "peers": ["nats://crewlet-2.internal:6222", "nats://crewlet-3.internal:6222"]}
SERVING_API = {"port": 8000, "external_url": "http://127.0.0.1:8000",
               "auth": {"admin": "serve", "tokens": [{"id": "founder", "token": "founder-token-0123456789", "grants": ["admin"]}]}}


def test_the_bundled_example_loads_with_its_variables_set():
    cfg = load_node_config(EXAMPLES / "crewlet.yaml", env=EXAMPLE_ENV)
    assert cfg.node.id == "node-1" and cfg.node.max_concurrent == 32
    assert cfg.stream.type == "embedded" and cfg.stream.store_dir == "var/stream"
    assert cfg.stream.sync == "always" and cfg.stream.sync_interval_seconds is None
    assert cfg.coordination.type == "local" and cfg.coordination.lease_ttl_seconds == 45
    assert cfg.secrets.active_key_id == "dev" and cfg.secrets.keys[0].material == KEY
    assert [t.grants for t in cfg.api.auth.tokens] == [["admin"], ["read"]]
    assert cfg.logging.level == "info" and cfg.logging.format == "console" and cfg.logging.stderr is True


def test_the_bundled_example_names_each_missing_variable():
    with pytest.raises(ConfigError) as info:
        load_node_config(EXAMPLES / "crewlet.yaml", env={})
    assert info.value.problems == [
        "secrets.keys[0].material: ${CREWLET_SECRET_KEY_DEV} is not set in the environment",
        "api.auth.tokens[0].token: ${CREWLET_API_TOKEN_FOUNDER} is not set in the environment",
        "api.auth.tokens[1].token: ${CREWLET_API_TOKEN_VIEWER} is not set in the environment",
    ]
    assert str(info.value).splitlines()[0].startswith("config: secrets.keys[0].material: ")


def test_fields_the_file_leaves_out_take_the_seeds_defaults():
    cfg = parse_node_config(node_text(), env={})
    assert cfg.node.labels == [] and cfg.node.max_concurrent == 32
    assert (cfg.stream.replicas, cfg.stream.event_retention_hours, cfg.stream.debug) == (1, 720, False)
    assert cfg.stream.cluster is None and cfg.stream.tls is None and cfg.stream.url is None
    assert cfg.store.path == "var/company.db"
    assert cfg.api.host == "127.0.0.1" and cfg.api.public is None
    assert cfg.logging.file is None and cfg.logging.stderr is True


def test_a_log_file_follows_the_logging_block_unless_it_says_otherwise():
    cfg = parse_node_config(node_text(logging={"level": "warn", "file": {"path": "var/log/n.log"}}), env={})
    assert (cfg.logging.file.max_size_mb, cfg.logging.file.max_backups) == (100, 5)
    assert (cfg.logging.file_level, cfg.logging.file_format) == ("warn", "console")
    cfg = parse_node_config(node_text(logging={"file": {"path": "x.log", "level": "debug", "format": ""}}), env={})
    assert (cfg.logging.file_level, cfg.logging.file_format) == ("debug", "console")


def test_the_node_id_comes_from_the_file_then_the_environment_then_the_host_name():
    assert parse_node_config(node_text(), env={"CREWLET_NODE_ID": "env-id"}).node.id == "node-1"
    from_env = parse_node_config(node_text(node={"id": REMOVE}), env={"CREWLET_NODE_ID": "env-id"})
    assert (from_env.node.id, from_env.node.id_source) == ("env-id", "env")
    from_host = parse_node_config(node_text(node=REMOVE), env={})
    assert (from_host.node.id, from_host.node.id_source) == (socket.gethostname(), "host")


def test_a_node_id_that_cannot_name_a_server_is_refused():
    assert "node.id: expected letters" in refusal_at(node_problems(node_text(node={"id": "two words"})), "node.id")


def test_a_declined_fsync_exposes_its_window_in_seconds():
    text = node_text(stream={"replicas": 3, "sync": "1m30s", "cluster": CLUSTER}, coordination={"type": "embedded-kv"})
    assert parse_node_config(text, env={}).stream.sync_interval_seconds == 90.0


def test_an_external_nats_stream_loads():
    text = node_text(stream={"type": "nats", "store_dir": REMOVE, "url": "nats://a:4222,nats://b:4222",
                             "credentials": "/etc/crewlet/engine.creds", "tls": {"ca": "/ca.pem", "cert": "/c.pem", "key": "/c.key"}},
                     coordination={"type": "embedded-kv"})
    cfg = parse_node_config(text, env={})
    assert cfg.stream.type == "nats" and cfg.stream.tls.key == "/c.key"


def test_a_wrong_type_or_range_is_refused_saying_what_was_expected():
    problems = node_problems(node_text(stream={"cluster": dict(CLUSTER, port="abc")}, coordination={"type": "embedded-kv"}))
    assert refusal_at(problems, "stream.cluster.port") == 'stream.cluster.port: expected an integer from 1 to 65535, got "abc"'
    problems = node_problems(node_text(api={"port": 70000}))
    assert refusal_at(problems, "api.port") == "api.port: expected an integer from 0 to 65535, got 70000"
    problems = node_problems(node_text(logging={"level": "verbose", "stderr": "yes please"}))
    assert refusal_at(problems, "logging.level") == 'logging.level: expected one of debug, info, warn, error, got "verbose"'
    assert refusal_at(problems, "logging.stderr") == 'logging.stderr: expected true or false, got "yes please"'


def test_an_unknown_key_anywhere_is_refused_by_name():
    assert "did you mean stream?" in refusal_at(node_problems(node_text(steam={})), "steam")
    assert "did you mean cluster?" in refusal_at(node_problems(node_text(stream={"clustr": {}})), "stream.clustr")
    text = node_text(api=dict(SERVING_API, auth={"admin": "serve", "tokens": [{"id": "a", "token": "t" * 20, "grant": ["admin"]}]}))
    assert "unknown field" in refusal_at(node_problems(text), "api.auth.tokens[0].grant")


def test_a_cluster_block_without_a_name_is_refused():
    problems = node_problems(node_text(stream={"cluster": dict(CLUSTER, name=REMOVE)}, coordination={"type": "embedded-kv"}))
    assert refusal_at(problems, "stream.cluster.name") == \
        "stream.cluster.name: a cluster block needs a name, or remove stream.cluster"


def test_two_cluster_members_are_refused_one_or_three_never_two():
    two = dict(CLUSTER, peers=["nats://crewlet-2.internal:6222"])
    problems = node_problems(node_text(stream={"cluster": two}, coordination={"type": "embedded-kv"}))
    assert "one node or three, never two" in refusal_at(problems, "stream.cluster.peers")


def test_this_nodes_own_route_and_repeats_are_left_out_of_the_member_count():
    peers = ["nats://crewlet-2.internal:6222", "nats://crewlet-1.internal:6222", "nats://crewlet-2.internal:6222"]
    text = node_text(node={"id": "crewlet-1"}, stream={"cluster": dict(CLUSTER, peers=peers)},
                     coordination={"type": "embedded-kv"})
    assert "one node or three" in refusal_at(node_problems(text), "stream.cluster.peers")


def test_replicas_above_one_with_no_peers_are_refused():
    problems = node_problems(node_text(stream={"replicas": 3}))
    assert "need peers" in refusal_at(problems, "stream.replicas")


def test_store_dir_is_refused_with_an_external_nats_stream():
    text = node_text(stream={"type": "nats", "url": "nats://a:4222"}, coordination={"type": "embedded-kv"})
    assert "refused with stream.type: nats" in refusal_at(node_problems(text), "stream.store_dir")


def test_store_dir_is_required_on_an_embedded_member():
    assert "required on an embedded member" in refusal_at(node_problems(node_text(stream={"store_dir": REMOVE})), "stream.store_dir")
    assert "required on an embedded member" in refusal_at(node_problems(node_text(stream={"store_dir": ""})), "stream.store_dir")


def test_the_url_is_required_for_an_external_nats_stream():
    text = node_text(stream={"type": "nats", "store_dir": REMOVE}, coordination={"type": "embedded-kv"})
    assert "required with stream.type: nats" in refusal_at(node_problems(text), "stream.url")


def test_a_url_that_is_not_nats_is_refused_without_repeating_its_credential():
    text = node_text(stream={"type": "nats", "store_dir": REMOVE, "url": "http://user:hunter2@a:4222"},
                     coordination={"type": "embedded-kv"})
    problem = refusal_at(node_problems(text), "stream.url")
    assert "not a NATS URL" in problem and "hunter2" not in problem


def test_local_coordination_beside_a_cluster_or_external_stream_is_refused():
    problems = node_problems(node_text(stream={"cluster": CLUSTER, "replicas": 3}))
    assert "set coordination.type: embedded-kv" in refusal_at(problems, "coordination.type")
    text = node_text(stream={"type": "nats", "store_dir": REMOVE, "url": "nats://a:4222"})
    assert "stream.type: nats" in refusal_at(node_problems(text), "coordination.type")


def test_half_a_tls_keypair_is_refused():
    text = node_text(stream={"type": "nats", "store_dir": REMOVE, "url": "nats://a:4222", "tls": {"cert": "/c.pem"}},
                     coordination={"type": "embedded-kv"})
    assert "half a keypair" in refusal_at(node_problems(text), "stream.tls.key")


def test_dial_options_on_an_embedded_member_are_refused():
    assert "dial option" in refusal_at(node_problems(node_text(stream={"token": "abc"})), "stream.token")


def test_stream_debug_is_refused_for_an_external_stream():
    text = node_text(stream={"type": "nats", "store_dir": REMOVE, "url": "nats://a:4222", "debug": True},
                     coordination={"type": "embedded-kv"})
    assert "refused with stream.type: nats" in refusal_at(node_problems(text), "stream.debug")


def test_a_declined_fsync_is_refused_where_it_would_not_be_honoured():
    assert "below stream.replicas: 3" in refusal_at(node_problems(node_text(stream={"sync": "30s"})), "stream.sync")
    local = dict(CLUSTER, peers=["nats://127.0.0.1:6223", "nats://localhost:6224"])
    text = node_text(stream={"sync": "30s", "replicas": 3, "cluster": local}, coordination={"type": "embedded-kv"})
    assert "all on this host" in refusal_at(node_problems(text), "stream.sync")
    assert "expected always or a duration" in refusal_at(node_problems(node_text(stream={"sync": "fast"})), "stream.sync")


def test_a_serving_api_needs_an_external_url_an_admin_answer_and_a_token():
    problems = node_problems(node_text(api={"port": 8000}))
    assert "required once api.port is set" in refusal_at(problems, "api.external_url")
    assert "required once api.port is set" in refusal_at(problems, "api.auth.admin")
    assert "at least one token" in refusal_at(problems, "api.auth.tokens")
    assert parse_node_config(node_text(api={"port": 0}), env={}).api.port == 0


def test_a_grant_other_than_admin_or_read_is_refused():
    tokens = [{"id": "a", "token": "t" * 20, "grants": ["write"]}]
    problems = node_problems(node_text(api=dict(SERVING_API, auth={"admin": "serve", "tokens": tokens})))
    assert refusal_at(problems, "api.auth.tokens[0].grants[0]") == \
        'api.auth.tokens[0].grants[0]: expected one of admin, read, got "write"'


def test_tokens_that_share_an_id_or_a_secret_are_refused_without_showing_it():
    tokens = [{"id": "a", "token": "same-secret-value", "grants": ["admin"]},
              {"id": "a", "token": "same-secret-value", "grants": ["read"]}]
    problems = node_problems(node_text(api=dict(SERVING_API, auth={"admin": "serve", "tokens": tokens})))
    assert "already the id" in refusal_at(problems, "api.auth.tokens[1].id")
    assert "same secret" in refusal_at(problems, "api.auth.tokens[1].token")
    assert not any("same-secret-value" in p for p in problems)


def test_a_public_listener_on_the_api_port_is_refused():
    problems = node_problems(node_text(api=dict(SERVING_API, public={"port": 8000})))
    assert "also api.port" in refusal_at(problems, "api.public.port")


def test_duplicate_key_ids_are_refused():
    keys = [{"id": "k1", "material": KEY}, {"id": "k1", "material": KEY}]
    problems = node_problems(node_text(secrets={"active_key_id": "k1", "keys": keys}))
    assert "already the id of secrets.keys[0]" in refusal_at(problems, "secrets.keys[1].id")


def test_an_active_key_id_naming_no_key_is_refused():
    problems = node_problems(node_text(secrets={"active_key_id": "k9"}))
    assert refusal_at(problems, "secrets.active_key_id") == 'secrets.active_key_id: "k9" names no key in secrets.keys (ids: k1)'


@pytest.mark.parametrize("secrets", ["", "secrets:\n", "secrets: {}\n", "secrets: {active_key_id: k1, keys: []}\n"])
def test_a_node_without_a_keyring_is_refused(secrets):
    problems = node_problems(node_text(secrets=REMOVE) + secrets)
    assert refusal_at(problems, "secrets.keys") == \
        "secrets.keys: a node needs a keyring; run `python manage.py crewlet_secrets keygen`"


@pytest.mark.parametrize("material", ["c2hvcnQ", "00ff" * 4, "too short to be a key", ""])
def test_key_material_under_32_bytes_is_refused_without_showing_it(material):
    problems = node_problems(node_text(secrets={"keys": [{"id": "k1", "material": material}]}))
    problem = refusal_at(problems, "secrets.keys[0].material")
    assert "at least 32 bytes" in problem and (not material or material not in problem)


@pytest.mark.parametrize("material,secret", [
    (KEY, base64.urlsafe_b64decode(KEY + "=" * (-len(KEY) % 4))),
    ("ab" * 32, b"\xab" * 32),
    ("a plain passphrase of thirty-two bytes!", b"a plain passphrase of thirty-two bytes!"),
], ids=["base64url", "hex", "plain text"])
def test_key_material_as_base64url_hex_or_plain_text_of_32_bytes_is_accepted(material, secret):
    cfg = parse_node_config(node_text(secrets={"keys": [{"id": "k1", "material": material}]}), env={})
    keyring = Keyring.from_config(cfg.secrets)
    assert keyring.key_ids == ["k1"]
    assert keyring.derive("probe") == Keyring([Key("k1", secret)], "k1").derive("probe")


def test_a_node_with_no_log_destination_is_refused():
    problems = node_problems(node_text(logging={"stderr": False}))
    assert "needs logging.file.path" in refusal_at(problems, "logging.stderr")
    assert "expected an integer from 0 to 1000" in refusal_at(
        node_problems(node_text(logging={"file": {"path": "x.log", "max_backups": 5000}})), "logging.file.max_backups")


def test_every_refusal_is_reported_at_once():
    text = node_text(stream={"cluster": {"port": 6222}, "store_dir": REMOVE}, secrets=REMOVE,
                     api={"port": 8000}, logging={"level": "loud"})
    problems = node_problems(text)
    for path in ("stream.cluster.name", "stream.store_dir", "secrets.keys", "api.external_url", "logging.level"):
        refusal_at(problems, path)


def test_no_refusal_carries_pydantic_wording():
    text = node_text(node={"max_concurrent": [1]}, stream={"cluster": "yes", "tls": {"x": 1}},
                     secrets={"keys": "k"}, api={"auth": {"tokens": [{}]}}, logging={"file": {}})
    for problem in node_problems(text):
        assert "pydantic" not in problem and "Input should" not in problem and "http" not in problem


def test_a_file_that_is_missing_or_not_yaml_is_refused_naming_the_path(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_node_config(tmp_path / "absent.yaml")
    assert info.value.problems == [f"{tmp_path / 'absent.yaml'}: no such file"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("node:\n  id: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_node_config(bad)
    assert info.value.problems[0].startswith(f"{bad}:3:1: not valid YAML")


def test_a_key_written_twice_is_refused_with_its_line():
    problems = node_problems(node_text() + "api: {port: 0}\n")
    assert "appears twice" in problems[0] and problems[0].startswith("crewlet.yaml:")
