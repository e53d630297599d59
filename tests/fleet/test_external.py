"""`stream.type: nats` against a server secured as an operator secures it (seed 002, "An
external NATS server"): TLS with client certificates verified, and an operator-mode account
whose users sign in with an NKey/JWT credentials file. Every connection the node opens -- the
queue's and the coordination store's -- dials with the same URL list, credentials and TLS,
so a node that reaches /ready has signed in on both (the leases and the presence lease ride
the coordination connection)."""
from __future__ import annotations

import pytest

from tests.fleet.servers import NatsServer, Operator, Pki, tls_server
from tests.ports import PortHold

pytestmark = pytest.mark.timeout(120)


def _names(server) -> set[str]:
    """The client names of the connections the server holds."""
    return {c.get("name", "") for c in server.connections()}


def test_a_node_signs_in_with_a_client_certificate_on_every_connection(nodes, tmp_path):
    pki = Pki(tmp_path / "pki")
    server = tls_server(tmp_path / "tls", pki).start()
    try:
        cert, key = pki.issue("engine", server=False)
        node = nodes("node-1")
        node.start(stream=(f'{{type: nats, url: "tls://127.0.0.1:{server.port}", '
                           f'tls: {{ca: "{pki.ca}", cert: "{cert}", key: "{key}"}}}}'),
                   coordination="embedded-kv")
        health = node.wait_ready()
        assert health["broker"] == "up" and health["revision"] is not None
        held = {c["name"]: c for c in server.connections()}
        for name in ("crewlet-node-1", "crewlet-coord-node-1"):  # the queue's and the coordination store's
            assert held[name]["tls_version"].startswith("1."), held[name]
    finally:
        server.stop()


def test_a_server_that_verifies_certificates_refuses_a_node_without_one(nodes, tmp_path):
    pki = Pki(tmp_path / "pki")
    server = tls_server(tmp_path / "tls", pki).start()
    try:
        node = nodes("node-1")
        node.start(stream=f'{{type: nats, url: "tls://127.0.0.1:{server.port}", tls: {{ca: "{pki.ca}"}}}}',
                   coordination="embedded-kv")
        assert node.wait_exit(60) == 1  # the broker's refusal, never a hang
        assert "tls://127.0.0.1:" in node.log_text() and "refused this node" in node.log_text()
    finally:
        server.stop()


def test_a_node_signs_in_with_a_credentials_file_through_a_url_list(nodes, tmp_path):
    operator = Operator(tmp_path / "operator")
    server = NatsServer(tmp_path / "nats", "accounts", operator.server_block()).start()
    try:
        creds = operator.credentials("engine")
        hold = PortHold()  # held, nobody listening: a dial there is refused and the client goes on to the next URL
        silent = f"nats://127.0.0.1:{hold.port}"
        node = nodes("node-1")
        node.start(stream=f'{{type: nats, url: "{silent},{server.url}", credentials: "{creds}"}}', coordination="embedded-kv")
        health = node.wait_ready()
        assert health["broker"] == "up" and health["revision"] is not None
        assert {"crewlet-node-1", "crewlet-coord-node-1"} <= _names(server)
        assert creds.read_text().split("SEED-----\n")[1].split("\n")[0] not in node.log_text()  # the seed never logged
    finally:
        server.stop()
