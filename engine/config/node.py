"""Tier A: one node's bootstrap file, `crewlet.yaml` (seed 002, "Deployment").

Read once at boot, before the store opens. Blocks and defaults are the seed's:
`node` ("Every node embeds a member of one cluster", "Replica count"), `stream` ("The
stream beyond one host", "An external NATS server", "What an acknowledged publish has
reached", "The embedded broker's own logs"), `store` ("The store"), `coordination`
("Separate processes", "Replica count"), `secrets` ("The single host"), `api` ("Running the
Engine + API", "Exposing webhooks without the admin API") and `logging` ("Logging").
The refusals that span fields are in `node_rules.py`.

Left out on purpose (DESIGN.md, "Deliberate differences"): the state logs' byte ceilings
(`stream.*_log_max_bytes`), leaf nodes (`stream.leaf`), the object store
(`store.objects`), the Turso pool (`store.max_open_conns`) and `api.artifacts`. Being
unknown, each is refused by name rather than accepted and ignored.
"""
from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping

from pydantic import Field, PrivateAttr

from engine.config.document import decode_document, read_file, read_yaml
from engine.config.errors import ConfigInvalid, describe_value
from engine.config.fields import Block, Flag, Secret, Sync, Text, choice, integer, number, parse_duration
from engine.queue.topics import EVENT_RETENTION_HOURS_DEFAULT

NODE_ID_ENV = "CREWLET_NODE_ID"
GIB = 1024 ** 3

# A node id is the NATS server name, a key in the coordination buckets and a host name
# more often than not: letters, digits, '.', '_' and '-'.
_NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")

Port = integer(1, 65535)


class NodeSection(Block):
    """`node`: who this node is and how many turns it runs at once."""

    id: Text | None = None
    max_concurrent: integer(1) = 32  # per process: N nodes is N x this (seed 002, "Replica count")
    labels: list[Text] = Field(default_factory=list)
    # How often the node sweeps seat placement and polls the activation pointer. Settings
    # rather than constants so the rules can be exercised at test speed.
    sweep_seconds: number(above=0) = 5.0
    revision_poll_seconds: number(above=0) = 5.0
    _id_source: str = PrivateAttr(default="file")

    @property
    def id_source(self) -> str:
        """Where `id` came from: "file", "env" (CREWLET_NODE_ID) or "host" (the host name)."""
        return self._id_source


class Cluster(Block):
    """`stream.cluster`: this embedded member's route listener and the members it dials."""

    name: Text | None = None
    port: Port = 6222
    host: Text | None = None       # unset binds every interface
    advertise: Text | None = None  # what peers dial when it is not what this member binds
    peers: list[Text] = Field(default_factory=list)


class TLS(Block):
    """`stream.tls`: dial-side TLS to an external NATS server."""

    ca: Text | None = None
    cert: Text | None = None
    key: Text | None = None


class Stream(Block):
    """`stream`: the embedded JetStream member, or the external NATS it dials."""

    type: choice("embedded", "nats") = "embedded"
    store_dir: Text | None = None
    # 6 GiB: the seed's floor, below what a fresh node reserves (validate warns).
    store_max_bytes: integer(6 * GIB) | None = None
    replicas: integer(1, 5) = 1
    sync: Sync = "always"
    event_retention_hours: integer(1) = EVENT_RETENTION_HOURS_DEFAULT
    debug: Flag = False
    cluster: Cluster | None = None
    url: Text | None = Field(default=None, repr=False)  # may carry userinfo
    credentials: Text | None = None
    token: Secret | None = Field(default=None, repr=False)
    tls: TLS | None = None

    @property
    def sync_interval_seconds(self) -> float | None:
        """None when every write is fsynced (`always`), else the window in seconds."""
        return None if self.sync == "always" else parse_duration(self.sync)

    @property
    def clustered(self) -> bool:
        """True when this node shares its stream with others (a cluster, or external NATS)."""
        return self.type == "nats" or self.cluster is not None


class Store(Block):
    """`store`: the one SQLite file this node owns (DESIGN.md, "The store")."""

    path: Text = "var/company.db"


class Coordination(Block):
    """`coordination`: where seat leases live."""

    type: choice("local", "embedded-kv") = "local"
    lease_ttl_seconds: integer(1) = 45


class Key(Block):
    """One keyring key. `material` is base64url, hex or plain text (see node_rules)."""

    id: Text
    material: Secret = Field(repr=False)


class Secrets(Block):
    """`secrets`: the keyring, the same on every node."""

    active_key_id: Text | None = None
    keys: list[Key] = Field(default_factory=list)


class Token(Block):
    """One API token: who it is, the secret, what it may do, and (optionally) the person it
    belongs to: `seat` names a seat of the company, whose handle the token's actions are
    recorded and summarised under instead of the token's id."""

    id: Text
    token: Secret = Field(repr=False)
    grants: list[choice("admin", "read")] = Field(default_factory=list)
    seat: Text | None = None


class Auth(Block):
    """`api.auth`: whether the admin API is served, and the tokens that reach the API."""

    admin: choice("serve", "refuse", empty_is_unset=True) = None
    tokens: list[Token] = Field(default_factory=list)


class Public(Block):
    """`api.public`: the listener for vendors' webhooks and the sandbox endpoints only."""

    port: Port
    host: Text = "0.0.0.0"  # every interface, unless said otherwise
    external_url: Text | None = None


class Api(Block):
    """`api`: the HTTP and WebSocket surface; port 0 binds nothing."""

    host: Text = "127.0.0.1"
    port: integer(0, 65535) = 8000
    external_url: Text | None = None
    trusted_proxies: list[Text] = Field(default_factory=list)
    auth: Auth = Field(default_factory=Auth)
    public: Public | None = None


LEVELS = ("debug", "info", "warn", "error")
FORMATS = ("console", "text", "json")


class LogFile(Block):
    """`logging.file`: a durable copy of the log, rotated by size."""

    path: Text
    format: choice(*FORMATS, empty_is_unset=True) = None  # unset follows logging.format
    level: choice(*LEVELS, empty_is_unset=True) = None    # unset follows logging.level
    # Bounded above: the size is held in bytes (a pebibyte of MB), and each backup is a
    # rename per rotation (seed 002, "Turning stderr off").
    max_size_mb: integer(1, 1_073_741_824) = 100
    max_backups: integer(0, 1000) = 5


class Logging(Block):
    """`logging`: how loud the node is, in what shape, and where it writes."""

    level: choice(*LEVELS) = "info"
    format: choice(*FORMATS) = "console"
    stderr: Flag = True
    file: LogFile | None = None

    @property
    def file_format(self) -> str | None:
        """The log file's format: its own, else logging.format; None without a file."""
        return None if self.file is None else (self.file.format or self.format)

    @property
    def file_level(self) -> str | None:
        """The log file's level: its own, else logging.level; None without a file."""
        return None if self.file is None else (self.file.level or self.level)


class NodeConfig(Block):
    """A decoded, validated `crewlet.yaml`; `node.id` is resolved."""

    node: NodeSection = Field(default_factory=NodeSection)
    stream: Stream = Field(default_factory=Stream)
    store: Store = Field(default_factory=Store)
    coordination: Coordination = Field(default_factory=Coordination)
    secrets: Secrets = Field(default_factory=Secrets)
    api: Api = Field(default_factory=Api)
    logging: Logging = Field(default_factory=Logging)
    _source: str = PrivateAttr(default="crewlet.yaml")

    @property
    def source(self) -> str:
        """The path (or name) the document was read from."""
        return self._source


def resolve_node_id(node: NodeSection, env: Mapping[str, str]) -> tuple[NodeSection, list[str]]:
    """Return node with its id resolved, and the refusal when the id cannot be one.

    Seed 002, "Every node embeds a member of one cluster": `node.id` in the file, then
    CREWLET_NODE_ID, then the default (the host name).
    """
    if node.id:
        node_id, where = node.id, "file"
    elif env.get(NODE_ID_ENV):
        node_id, where = env[NODE_ID_ENV], "env"
    else:
        node_id, where = socket.gethostname(), "host"
    resolved = node.model_copy(update={"id": node_id})
    resolved._id_source = where
    if _NODE_ID.match(node_id or ""):
        return resolved, []
    said = {"file": "", "env": f" (from {NODE_ID_ENV})", "host": " (the host name)"}[where]
    return resolved, [f"node.id: expected letters, digits, '.', '_' and '-', got {describe_value(node_id)}{said}"]


def parse_node_config(text: str, env: Mapping[str, str] | None = None, source: str = "crewlet.yaml") -> NodeConfig:
    """Decode and validate a Tier A document; ConfigError listing every refusal."""
    from engine.config.node_rules import node_refusals

    env = os.environ if env is None else env
    decoded = decode_document(NodeConfig, read_yaml(text, source), env)
    blocks, refused = decoded.blocks, []
    if "node" in blocks:
        blocks["node"], refused = resolve_node_id(blocks["node"], env)
    problems = decoded.kept_problems(refused + node_refusals(blocks))
    if problems or not decoded.complete:
        raise ConfigInvalid(problems)
    cfg = NodeConfig.model_validate(blocks)
    cfg._source = source
    return cfg


def load_node_config(path: str | os.PathLike, env: Mapping[str, str] | None = None) -> NodeConfig:
    """Read and validate the Tier A file at path; ConfigError naming the path or fields."""
    return parse_node_config(read_file(path), env=env, source=os.fspath(path))
