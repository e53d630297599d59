"""Three embedded broker members that form one cluster on 127.0.0.1, each presenting the route
credentials one keyring derives. Their route ports are held (`PortHold`) until the caller has
started the members it wants and releases them."""
from __future__ import annotations

from pathlib import Path

from engine.config.keyring import Keyring
from engine.queue.broker import ClusterSpec, EmbeddedBroker, route_credentials
from tests.ports import PortHold


def three_members(tmp_path: Path) -> tuple[list[PortHold], list[EmbeddedBroker]]:
    user, password = route_credentials(Keyring.from_pairs([("k1", "x" * 32)], "k1"))
    holds = [PortHold() for _ in range(3)]  # route ports each member's peers must name before it starts
    ports = [h.port for h in holds]
    members = [
        EmbeddedBroker(store_dir=str(tmp_path / f"m{i}"), server_name=f"member-{i}",
                       cluster=ClusterSpec(name="crewlet", port=port, host="127.0.0.1",
                                           peers=tuple(f"nats://127.0.0.1:{p}" for p in ports if p != port),
                                           route_user=user, route_password=password))
        for i, port in enumerate(ports)
    ]
    return holds, members
