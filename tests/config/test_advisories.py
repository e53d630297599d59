"""Advisories: what a valid document carries as a consequence (seed 002, "Logging": the
same list `crewlet validate` prints and every start logs as config_advisory)."""
from __future__ import annotations

from engine.config import company_advisories, node_advisories, parse_company, parse_node_config
from tests.config.conftest import REMOVE, company_text, node_text

CLUSTER = {"name": "crewlet", "port": 6222, "host": "10.0.0.11",
           "peers": ["nats://crewlet-2.internal:6222", "nats://crewlet-3.internal:6222"]}
API = {"port": 8000, "external_url": "http://127.0.0.1:8000",
       "auth": {"admin": "serve", "tokens": [{"id": "a", "token": "token-0123456789abcdef", "grants": ["admin"]}]}}


def advisories(**changes) -> list[str]:
    return node_advisories(parse_node_config(node_text(**changes), env={}))


def at(items: list[str], path: str) -> str:
    found = [a for a in items if a.startswith(path + ": ") or a.startswith(path + " ")]
    assert found, f"no advisory at {path}; got: {items}"
    return found[0]


def test_a_plain_single_host_file_has_no_advisories():
    assert advisories(api=API) == []


def test_a_declined_fsync_is_an_advisory():
    items = advisories(stream={"sync": "30s", "replicas": 3, "cluster": CLUSTER}, coordination={"type": "embedded-kv"})
    assert "30s behind the disk" in at(items, "stream.sync")


def test_broker_debug_that_nothing_records_is_an_advisory():
    assert "nothing records them" in at(advisories(stream={"debug": True}), "stream.debug")
    assert not [a for a in advisories(stream={"debug": True}, logging={"level": "debug"}) if a.startswith("stream.debug")]


def test_debug_logging_is_an_advisory():
    assert "debug" in at(advisories(logging={"level": "debug"}), "logging.level")


def test_an_https_address_with_no_trusted_proxy_is_an_advisory():
    items = advisories(api=dict(API, external_url="https://crewlet.example.com"))
    assert "no proxy is trusted" in at(items, "api.trusted_proxies")
    assert advisories(api=dict(API, external_url="https://crewlet.example.com", trusted_proxies=["10.0.0.0/8"])) == []


def test_serving_beyond_this_host_without_tls_is_an_advisory():
    assert "in the clear" in at(advisories(api=dict(API, host="0.0.0.0")), "api.host")


def test_a_route_port_on_every_interface_is_an_advisory():
    items = advisories(stream={"replicas": 3, "cluster": dict(CLUSTER, host=REMOVE)}, coordination={"type": "embedded-kv"})
    assert "binds every interface" in at(items, "stream.cluster.host")


def test_this_nodes_own_route_in_the_peers_is_left_out_with_an_advisory():
    peers = CLUSTER["peers"] + ["nats://node-1.internal:6222"]
    items = advisories(stream={"replicas": 3, "cluster": dict(CLUSTER, peers=peers)}, coordination={"type": "embedded-kv"})
    assert "own route" in at(items, "stream.cluster.peers[2]")


def test_one_replica_on_a_cluster_is_an_advisory():
    items = advisories(stream={"cluster": CLUSTER}, coordination={"type": "embedded-kv"})
    assert "set stream.replicas: 3" in at(items, "stream.replicas")


def test_a_company_with_no_provider_is_told_its_agents_hold_their_mail():
    company = parse_company(company_text(providers=REMOVE), env={})
    assert "providers.llm is empty: agent seats will hold their mail until a provider is added" in company_advisories(company)


def test_a_ceiling_that_can_never_bind_is_an_advisory():
    org = {"seats": [{"handle": "alice", "kind": "agent", "token_budget": {"day": 500}}]}
    company = parse_company(company_text(token_budget={"day": 100, "week": 50}, org=org), env={})
    items = company_advisories(company)
    assert "can never bind" in at(items, "token_budget.day")
    assert "can never bind" in at(items, "org.seats[0].token_budget.day")


def test_the_bundled_company_has_no_advisories(example_company):
    assert company_advisories(example_company) == []
