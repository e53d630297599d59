"""NATS servers a fleet dials that are not any node's own (seed 002, "An external NATS
server"): one secured by TLS with client certificates, one in operator mode whose users sign
in with an NKey/JWT credentials file, and a three-server cluster. Every key, certificate and
JWT is made here, in the test, with `cryptography` and `nkeys`; nothing leaves 127.0.0.1."""
from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import nkeys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from engine.queue.broker import nats_server_binary
from tests.node.harness import eventually
from tests.ports import PortHold

MAX_PAYLOAD = 8 * 1024 * 1024  # seed 002: every server a node dials carries 8 MiB


# -- certificates ---------------------------------------------------------------------------
@dataclass
class Pki:
    """A private CA and the certificates it issued, as PEM files under `home`."""

    home: Path
    ca: Path = field(init=False)

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crewlet test CA")])
        self._ca_cert = (self._builder(name, name, self._ca_key.public_key())
                         .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                         .sign(self._ca_key, hashes.SHA256()))
        self.ca = self._write("ca.pem", self._ca_cert.public_bytes(serialization.Encoding.PEM))

    @staticmethod
    def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.timezone.utc)
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1)))

    def _write(self, name: str, data: bytes) -> Path:
        path = self.home / name
        path.write_bytes(data)
        os.chmod(path, 0o600)
        return path

    def issue(self, name: str, *, server: bool) -> tuple[Path, Path]:
        """(cert, key) for a server on 127.0.0.1, or for a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = self._builder(subject, self._ca_cert.subject, key.public_key())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return (self._write(f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM)),
                self._write(f"{name}.key", key_pem))


# -- operator-mode JWTs -----------------------------------------------------------------------
def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _keypair(prefix: int) -> nkeys.KeyPair:
    return nkeys.from_seed(nkeys.encode_seed(os.urandom(32), prefix))


def _public(kp: nkeys.KeyPair) -> str:
    return kp.public_key.decode()


def _jwt(issuer: nkeys.KeyPair, subject: str, name: str, nats: dict) -> str:
    """A NATS JWT (v2) signed by `issuer`: what `nsc` issues."""
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    claims = {"iat": int(time.time()), "iss": _public(issuer), "name": name, "sub": subject, "nats": {**nats, "version": 2}}
    claims["jti"] = base64.b32encode(os.urandom(20)).decode().rstrip("=")
    body = _b64(json.dumps(claims).encode())
    signature = issuer.sign(f"{header}.{body}".encode())
    return f"{header}.{body}.{_b64(signature)}"


UNLIMITED_ACCOUNT = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
                     "conn": -1, "leaf": -1, "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}


@dataclass
class Operator:
    """An operator, a system account, and one JetStream-enabled account for the fleet, whose
    users sign in with a credentials file (the NKey/JWT pair `nsc` would issue)."""

    home: Path

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self._operator = _keypair(nkeys.PREFIX_BYTE_OPERATOR)
        self._system = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        self._account = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        op = _public(self._operator)
        self.operator_jwt = _jwt(self._operator, op, "crewlet-test-operator",
                                 {"type": "operator", "system_account": _public(self._system)})
        self.system_jwt = _jwt(self._operator, _public(self._system), "SYS", {"type": "account", "limits": {
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True, "conn": -1, "leaf": -1}})
        self.account_jwt = _jwt(self._operator, _public(self._account), "crewlet", {"type": "account", "limits": UNLIMITED_ACCOUNT})

    def server_block(self) -> str:
        return (f'operator: "{self.operator_jwt}"\nsystem_account: "{_public(self._system)}"\nresolver: MEMORY\n'
                f'resolver_preload: {{\n  {_public(self._system)}: "{self.system_jwt}"\n'
                f'  {_public(self._account)}: "{self.account_jwt}"\n}}\n')

    def credentials(self, user: str) -> Path:
        """A credentials file for a new user of the fleet's account, mode 0600."""
        kp = _keypair(nkeys.PREFIX_BYTE_USER)
        token = _jwt(self._account, _public(kp), user, {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1,
                                                        "payload": -1})
        text = ("-----BEGIN NATS USER JWT-----\n" + token + "\n------END NATS USER JWT------\n\n"
                "************************* IMPORTANT *************************\n"
                "NKEY Seed printed below can be used to sign and prove identity.\n\n"
                "-----BEGIN USER NKEY SEED-----\n" + kp.seed.decode() + "\n------END USER NKEY SEED------\n")
        path = self.home / f"{user}.creds"
        path.write_text(text)
        os.chmod(path, 0o600)
        return path


# -- servers ------------------------------------------------------------------------------------
def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class NatsServer:
    """One nats-server this test runs, from a config block it is given (JetStream on, 8 MiB)."""

    def __init__(self, home: Path, name: str, block: str = "", *, port: int | None = None) -> None:
        self.home = home
        self.name = name
        self.block = block
        # Held for the server's whole life in the test (tests/ports.py), so a member restarted
        # under the fleet comes back on the number its peers and the nodes' URL lists name.
        self.holds = [PortHold() for _ in range(1 if port else 2)]
        self.port = port or self.holds[-1].port
        self.monitor_port = self.holds[0].port
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> "NatsServer":
        self.home.mkdir(parents=True, exist_ok=True)
        conf = self.home / "nats.conf"
        conf.write_text(f'listen: "127.0.0.1:{self.port}"\nserver_name: {self.name}\nmax_payload: {MAX_PAYLOAD}\n'
                        f'http: "127.0.0.1:{self.monitor_port}"\njetstream {{ store_dir: "{self.home / "js"}" }}\n{self.block}')
        self.proc = subprocess.Popen([nats_server_binary(), "-c", str(conf)], stdout=open(self.home / "server.log", "ab"),
                                     stderr=subprocess.STDOUT)
        eventually(lambda: _listening(self.port) or self.proc.poll() is not None, 30, f"{self.name} to listen")
        assert self.proc.poll() is None, (self.home / "server.log").read_text()[-2000:]
        return self

    def connections(self) -> list[dict]:
        """The client connections the server holds, as its monitoring endpoint (/connz) lists them."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor_port}/connz?auth=1&limit=1024", timeout=5) as r:
            return json.loads(r.read()).get("connections") or []

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def tls_server(home: Path, pki: Pki) -> NatsServer:
    """A server that verifies client certificates (`tls { verify: true }`, the hardened default)."""
    cert, key = pki.issue("server", server=True)
    block = f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{pki.ca}", verify: true, timeout: 5 }}\n'
    return NatsServer(home, "tls-server", block)


class Cluster:
    """Three nats-servers routed to each other: an operator's own JetStream cluster."""

    def __init__(self, home: Path, name: str = "ext", size: int = 3) -> None:
        self.route_holds = [PortHold() for _ in range(size)]
        routes = [hold.port for hold in self.route_holds]
        self.servers = []
        for i in range(size):
            peers = ", ".join(f'"nats://127.0.0.1:{p}"' for j, p in enumerate(routes) if j != i)
            block = f'cluster {{ name: {name}, listen: "127.0.0.1:{routes[i]}", routes: [{peers}] }}\n'
            self.servers.append(NatsServer(home / f"{name}-{i + 1}", f"{name}-{i + 1}", block))

    @property
    def url(self) -> str:
        return ",".join(s.url for s in self.servers)

    def start(self) -> "Cluster":
        for server in self.servers:
            server.start()
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
