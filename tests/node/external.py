"""A NATS server that is not the node's own: what `stream.type: nats` dials in a fleet. It
listens on a port it picks itself and reports in its ports file, so no other process can take
the port between a choice and the bind."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from engine.queue.broker import nats_server_binary
from tests.node.harness import eventually

MiB = 1024 * 1024


class ExternalNats:
    def __init__(self, home: Path, *, token: str = "fleet-token-0123456789", max_payload: int = 8 * MiB) -> None:
        self.home = home
        self.token = token
        self.port = 0  # known once started: the server's own pick
        self.max_payload = max_payload
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def stream_block(self) -> str:
        return f'{{type: nats, url: "{self.url}", token: "{self.token}"}}'

    def start(self) -> "ExternalNats":
        self.home.mkdir(parents=True, exist_ok=True)
        conf = self.home / "nats.conf"
        conf.write_text(
            f'listen: "127.0.0.1:-1"\nports_file_dir: "{self.home}"\nserver_name: fleet\n'
            f'max_payload: {self.max_payload}\n'
            f'authorization {{ token: "{self.token}" }}\njetstream {{ store_dir: "{self.home / "js"}" }}\n'
        )
        self.proc = subprocess.Popen([nats_server_binary(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ports = self.home / f"nats-server_{self.proc.pid}.ports"

        def listening() -> int | None:
            # Written once the client listener is bound: the port it got.
            try:
                url = json.loads(ports.read_text())["nats"][0]
            except (OSError, ValueError, KeyError, IndexError):
                return None
            return int(url.rsplit(":", 1)[1])

        self.port = eventually(listening, 30, "the external nats-server to listen")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
