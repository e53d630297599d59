"""Finding 4: the embedded cluster's route port had no authorization and listened on every
interface: a rogue nats-server routed to it with no credentials, and its anonymous client saw
the node's traffic and an answer from its JetStream API. Now the route port binds
`stream.cluster.host` and admits only a member presenting the credentials the keyring derives
(engine.queue.broker.route_credentials)."""
from __future__ import annotations

import asyncio
import subprocess
import uuid

import nats
import pytest

from engine.config.keyring import Keyring
from engine.queue.broker import nats_server_binary, route_credentials
from tests.node.harness import KEY, NodeProcess, eventually
from tests.ports import PortHold
from tests.notify import deliveries as d
from tests.notify.http import post
from tests.security.conftest import no_traceback, still_ready

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def member(tmp_path_factory):
    """Three real nodes clustered on 127.0.0.1 (one node or three, never two), each its own
    member; the first is the one attacked."""
    home = tmp_path_factory.mktemp("cluster")
    holds = [PortHold() for _ in range(3)]  # route ports each member's peers must name before it starts
    ports = [h.port for h in holds]
    nodes = []
    try:
        for i, port in enumerate(ports):
            peers = ", ".join(f'"nats://127.0.0.1:{p}"' for p in ports if p != port)
            node = NodeProcess(home=home / f"node-{i + 1}", node_id=f"node-{i + 1}")
            stream = (f'{{type: embedded, store_dir: "{node.home / "stream"}", '
                      f'cluster: {{name: crewlet, port: {port}, host: 127.0.0.1, peers: [{peers}]}}}}')
            node.start(company=d.company_yaml() if i == 0 else None, env=d.ENV, stream=stream, coordination="embedded-kv")
            node.route_port = port
            nodes.append(node)
        for node in nodes:
            node.wait_ready(120)
        yield nodes[0]
    finally:
        for node in nodes:
            node.stop()


class Rogue:
    """A nats-server of the attacker's, routed at the node's port, with an open client port."""

    def __init__(self, home, route_to: str) -> None:
        self.holds = [PortHold(), PortHold()]
        self.client_port, self.route_port = (h.port for h in self.holds)
        config = home / f"rogue-{uuid.uuid4().hex[:6]}.conf"
        config.write_text(f'server_name: rogue\nlisten: "127.0.0.1:{self.client_port}"\n'
                          f'cluster {{ name: crewlet, listen: "127.0.0.1:{self.route_port}", routes: ["{route_to}"] }}\n')
        self.log = home / f"{config.stem}.log"
        self.proc = subprocess.Popen([nats_server_binary(), "-c", str(config)], stdout=open(self.log, "wb"),
                                     stderr=subprocess.STDOUT)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


async def _what_the_rogue_sees(rogue: Rogue, node) -> tuple[str, int]:
    """(the JetStream API's answer through the rogue, node messages its client saw)."""
    client = await nats.connect(f"nats://127.0.0.1:{rogue.client_port}", connect_timeout=5, allow_reconnect=False)
    seen: list = []
    try:
        async def saw(msg) -> None:
            seen.append(msg.subject)

        await client.subscribe(">", cb=saw)
        await client.flush()
        body = d.dumps(d.github_comment("@octo-alice traffic the rogue should not see"))
        await asyncio.to_thread(post, node, "/webhooks/github", body, d.github_headers(body))
        try:
            reply = await client.request("$JS.API.INFO", b"", timeout=2)
            answer = reply.data.decode()
        except Exception as exc:  # no responders, or silence: nothing of the node's answered
            answer = type(exc).__name__
        return answer, [s for s in seen if not s.startswith("_INBOX") and s != "$JS.API.INFO"]  # less its own request
    finally:
        await client.close()


def test_a_rogue_server_without_the_route_credentials_is_refused(member, tmp_path):
    rogue = Rogue(tmp_path, f"nats-route://127.0.0.1:{member.route_port}")
    try:
        eventually(lambda: "authorization" in rogue.log.read_text(errors="replace").lower()
                   or "authentication" in member.log_text().lower(), 30, "the route to be refused")
        answer, seen = asyncio.run(_what_the_rogue_sees(rogue, member))
        assert "NoResponders" in answer or "Timeout" in answer, answer
        assert seen == []
    finally:
        rogue.stop()
    still_ready(member)
    no_traceback(member)


def test_the_same_server_with_the_credentials_would_join(member, tmp_path):
    """The control: what refuses the rogue is the credentials, not its address or its config."""
    user, password = route_credentials(Keyring.from_pairs([("k1", KEY)], "k1"))
    rogue = Rogue(tmp_path, f"nats-route://{user}:{password}@127.0.0.1:{member.route_port}")
    try:
        def joined():
            answer, _ = asyncio.run(_what_the_rogue_sees(rogue, member))
            return '"type"' in answer or "memory" in answer
        eventually(joined, 60, "a credentialed member's client to reach JetStream", interval=1.0)
    finally:
        rogue.stop()


def test_the_route_port_listens_on_cluster_host_only(member):
    listening = []
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, port = local.split(":")
        if int(port, 16) == member.route_port and state == "0A":  # LISTEN
            listening.append(address)
    assert listening == ["0100007F"]  # 127.0.0.1, not 0.0.0.0
