"""Tier A's cross-field refusals and its advisories (seed 002, "Deployment").

`node_refusals` judges the blocks of a `crewlet.yaml` that decoded, each rule only when
the blocks it reads are there, so one bad block hides nothing about another.
`node_advisories` lists what a valid file carries as a consequence: `crewlet validate`
prints them and every start logs them as `config_advisory` (seed 002, "Logging").
"""
from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from engine.config.errors import describe_value
from engine.config.keyring import KeyringError, MIN_KEY_BYTES, decode_material

KEYGEN = "run `python manage.py crewlet_secrets keygen`"
_EVERY_INTERFACE = {"", "0.0.0.0", "::", "[::]"}
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def node_refusals(blocks: dict[str, Any]) -> list[str]:
    """Every cross-field refusal the decoded blocks earn, each `path: message`."""
    out: list[str] = []
    stream, node = blocks.get("stream"), blocks.get("node")
    if stream is not None:
        out += _stream_refusals(stream)
        if node is not None and stream.cluster is not None and stream.cluster.name:
            out += _member_refusals(stream, node.id)
    if stream is not None and blocks.get("coordination") is not None:
        out += _coordination_refusals(blocks["coordination"], stream)
    if blocks.get("secrets") is not None:
        out += _secrets_refusals(blocks["secrets"])
    if blocks.get("api") is not None:
        out += _api_refusals(blocks["api"], stream)
    if blocks.get("logging") is not None:
        out += _logging_refusals(blocks["logging"])
    return out


def _stream_refusals(stream) -> list[str]:
    out: list[str] = []
    if stream.type == "embedded":
        # "The stream beyond one host": store_dir is required on every member; empty
        # would keep every stream in memory and lose the company's records on restart.
        if not stream.store_dir:
            out.append("stream.store_dir: required on an embedded member: every data node keeps its "
                       "streams here, and without it the first restart loses them; set a directory")
        for name in ("url", "credentials", "token", "tls"):
            if getattr(stream, name) is not None:
                out.append(f"stream.{name}: a dial option for stream.type: nats; an embedded member dials "
                           f"nothing, so remove stream.{name} (or set stream.type: nats)")
    else:
        if stream.store_dir:
            out.append("stream.store_dir: refused with stream.type: nats: it is where an embedded server "
                       "persists, and an external cluster keeps its own storage; remove it")
        if not stream.url:
            out.append("stream.url: required with stream.type: nats: the NATS server (or a comma-separated "
                       "list of a cluster's servers) to dial")
        if stream.cluster is not None:
            out.append("stream.cluster: only embedded members form a cluster; remove it with stream.type: nats")
        if stream.debug:
            out.append("stream.debug: refused with stream.type: nats: an external cluster logs where its own "
                       "operator configured it, so the flag would reach nothing; remove it")
    if stream.url:
        out += _url_refusals(stream.url)
    if stream.tls is not None and bool(stream.tls.cert) != bool(stream.tls.key):
        have, missing = ("cert", "key") if stream.tls.cert else ("key", "cert")
        out.append(f"stream.tls.{missing}: half a keypair: stream.tls.{have} is set and stream.tls.{missing} "
                   "is not; set both or neither")
    cluster = stream.cluster
    if cluster is not None:
        if not cluster.name:
            out.append("stream.cluster.name: a cluster block needs a name, or remove stream.cluster")
        for i, peer in enumerate(cluster.peers):
            if _route(peer) is None:
                out.append(f"stream.cluster.peers[{i}]: expected a route URL such as "
                           f"nats://crewlet-2.internal:6222, got {describe_value(peer)}")
        if cluster.advertise and _route(cluster.advertise, cluster.port) is None:
            out.append(f"stream.cluster.advertise: expected a host, or host:port, got {describe_value(cluster.advertise)}")
    if stream.replicas > 1 and stream.type == "embedded" and not (cluster and cluster.peers):
        out.append(f"stream.replicas: {stream.replicas} copies need peers: an embedded stream with no "
                   "stream.cluster.peers has one member; set stream.replicas: 1 or name the peers")
    out += _sync_refusals(stream)
    return out


def _sync_refusals(stream) -> list[str]:
    """"What an acknowledged publish has reached": a declined fsync is refused where it
    would be recorded and then not honoured."""
    if stream.sync == "always":
        return []
    head = f"stream.sync: {stream.sync} is refused"
    if stream.type == "nats":
        return [f"{head} with stream.type: nats: it configures the embedded server's file store, and an "
                "external cluster stores its own data (set sync_interval on that cluster instead)"]
    if stream.replicas < 3:
        return [f"{head} below stream.replicas: 3: the disk it trades away is the only copy there is, so "
                "the window buys nothing; remove stream.sync (always) or replicate to three members"]
    peers = [_route(p) for p in (stream.cluster.peers if stream.cluster else [])]
    if peers and all(r is not None and _is_loopback(r[0]) for r in peers):
        return [f"{head} on a cluster whose peers are all on this host: the majority it trades for shares "
                "one power supply and one page cache; remove stream.sync (always)"]
    return []


def cluster_members(stream, node_id: str) -> tuple[int, list[str]]:
    """Count this node and the distinct peers it names; also the peers left out, and why.

    Seed 002: an entry recognisably this node's own route, or a repeat, is left out of
    the count with a warning; an alias of this host it cannot recognise is counted.
    """
    cluster = stream.cluster
    own_hosts = {h.lower() for h in (cluster.host, node_id) if h and h not in _EVERY_INTERFACE}
    if cluster.advertise and _route(cluster.advertise, cluster.port):
        own_hosts.add(_route(cluster.advertise, cluster.port)[0].lower())
    seen: set[tuple[str, int]] = set()
    left_out: list[str] = []
    for i, peer in enumerate(cluster.peers):
        route = _route(peer)
        if route is None:
            continue
        host, port = route[0].lower(), route[1]
        own = port == cluster.port and (host in own_hosts or host.split(".")[0] == node_id.lower() or _is_loopback(host))
        if own:
            left_out.append(f"stream.cluster.peers[{i}]: {peer} is this node's own route; it is left out of the member count")
        elif (host, port) in seen:
            left_out.append(f"stream.cluster.peers[{i}]: {peer} repeats an earlier peer; it is left out of the member count")
        else:
            seen.add((host, port))
    return 1 + len(seen), left_out


def _member_refusals(stream, node_id: str) -> list[str]:
    members, _ = cluster_members(stream, node_id)
    out = []
    if members == 2:
        out.append("stream.cluster.peers: one node or three, never two: this node and one peer make two "
                   "members, which have no quorum without each other, so the fleet stops when either "
                   "restarts; name a third member or remove stream.cluster")
    if stream.replicas > members and stream.cluster.peers:
        out.append(f"stream.replicas: {stream.replicas} is more copies than the {members} members "
                   "stream.cluster names; lower stream.replicas or name more peers")
    return out


def _coordination_refusals(coordination, stream) -> list[str]:
    if coordination.type != "local" or not stream.clustered:
        return []
    beside = "stream.type: nats" if stream.type == "nats" else "a clustered stream (stream.cluster)"
    return [f"coordination.type: local is one process's store: beside {beside} every node would claim "
            "every seat; set coordination.type: embedded-kv"]


def _secrets_refusals(secrets) -> list[str]:
    """"The single host": a keyring is required on every node, the same on each."""
    if not secrets.keys:
        return [f"secrets.keys: a node needs a keyring; {KEYGEN}"]
    out: list[str] = []
    first: dict[str, int] = {}
    for i, key in enumerate(secrets.keys):
        if not key.id:
            out.append(f"secrets.keys[{i}].id: empty: every key needs an id")
        elif key.id in first:
            out.append(f"secrets.keys[{i}].id: {describe_value(key.id)} is already the id of "
                       f"secrets.keys[{first[key.id]}]; key ids are unique")
        else:
            first[key.id] = i
        out += _material_refusals(i, key.material)
    if not secrets.active_key_id:
        out.append("secrets.active_key_id: missing: name the key in secrets.keys that signs")
    elif secrets.active_key_id not in first:
        out.append(f"secrets.active_key_id: {describe_value(secrets.active_key_id)} names no key in "
                   f"secrets.keys (ids: {', '.join(first) or 'none'})")
    return out


def _material_refusals(i: int, material: str) -> list[str]:
    """Key material is read as engine.config.keyring reads it: hex, then base64url, else the
    text's own UTF-8 bytes; whichever reading applies must give 32 bytes or more."""
    try:
        decode_material(material)
    except KeyringError:
        return [f"secrets.keys[{i}].material: expected at least {MIN_KEY_BYTES} bytes of key material "
                f"(base64url or hex as keygen prints it, or plain text), got {len(material)} characters "
                f"that carry fewer; {KEYGEN}"]
    return []


def _api_refusals(api, stream) -> list[str]:
    out: list[str] = []
    if api.port > 0:
        # "Running the Engine + API": three settings stop being optional with a port.
        if not api.external_url:
            out.append("api.external_url: required once api.port is set: the address a browser reaches "
                       "this deployment at (or set api.port: 0)")
        if api.auth.admin is None:
            out.append("api.auth.admin: required once api.port is set: serve or refuse")
        if not api.auth.tokens:
            out.append("api.auth.tokens: at least one token is required once api.port is set "
                       "(or set api.port: 0)")
    for path, url in (("api.external_url", api.external_url),
                      ("api.public.external_url", api.public.external_url if api.public else None)):
        if url and not _is_web_url(url):
            out.append(f"{path}: expected an http or https URL such as https://crewlet.example.com, "
                       f"got {describe_value(url)}")
    for i, block in enumerate(api.trusted_proxies):
        try:
            ipaddress.ip_network(block, strict=False)
        except ValueError:
            out.append(f"api.trusted_proxies[{i}]: expected an address or a CIDR block such as "
                       f"10.0.0.0/8, got {describe_value(block)}")
    out += _token_refusals(api.auth.tokens)
    public = api.public
    if public is not None:
        if api.port > 0 and public.port == api.port and _overlap(public.host, api.host):
            out.append(f"api.public.port: {public.port} is also api.port on the same address; give the "
                       "public listener a port of its own")
        cluster = stream.cluster if stream is not None else None
        if cluster is not None and public.port == cluster.port and _overlap(public.host, cluster.host or ""):
            out.append(f"api.public.port: {public.port} is also stream.cluster.port on the same address; "
                       "give the public listener a port of its own")
    return out


def _token_refusals(tokens) -> list[str]:
    out: list[str] = []
    ids: dict[str, int] = {}
    values: dict[str, int] = {}
    for i, token in enumerate(tokens):
        path = f"api.auth.tokens[{i}]"
        if not token.id:
            out.append(f"{path}.id: empty: every token needs an id")
        elif token.id in ids:
            out.append(f"{path}.id: {describe_value(token.id)} is already the id of api.auth.tokens[{ids[token.id]}]")
        else:
            ids[token.id] = i
        if not token.token:
            out.append(f"{path}.token: empty: a token that is empty would admit anybody")
        elif token.token in values:
            out.append(f"{path}.token: the same secret as api.auth.tokens[{values[token.token]}].token; "
                       "every token needs its own")
        else:
            values[token.token] = i
        if not token.grants:
            out.append(f"{path}.grants: a token needs a grant: admin or read")
    return out


def _logging_refusals(logging) -> list[str]:
    """"Turning stderr off": a node with neither destination is refused, by name."""
    out: list[str] = []
    if logging.file is not None and not logging.file.path:
        out.append("logging.file.path: empty: name the log file, or remove logging.file")
    elif not logging.stderr and logging.file is None:
        out.append("logging.stderr: false needs logging.file.path: a node with neither destination logs "
                   "nowhere; set logging.file.path or remove logging.stderr: false")
    return out


def _url_refusals(url: str) -> list[str]:
    out = []
    for n, part in enumerate(url.split(","), start=1):
        try:
            parts = urlsplit(part.strip())
            ok = parts.scheme in ("nats", "tls", "ws", "wss") and bool(parts.hostname)
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            ok = False
        if not ok:
            # Never quoted: a URL may carry a credential as its userinfo.
            out.append(f"stream.url: server {n} of the list is not a NATS URL (expected nats://host:4222)")
    return out


def _route(entry: str, default_port: int = 6222) -> tuple[str, int] | None:
    """(host, port) of a route URL or host[:port]; None when it is not one."""
    text = entry.strip()
    try:
        parts = urlsplit(text if "://" in text else f"nats://{text}")
        if not parts.hostname or parts.path not in ("", "/"):
            return None
        return parts.hostname, parts.port or default_port
    except ValueError:
        return None


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _overlap(a: str, b: str) -> bool:
    """True when two listeners' hosts collide: the same, or either binds every interface."""
    return a == b or a in _EVERY_INTERFACE or b in _EVERY_INTERFACE


def _is_web_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def node_advisories(cfg) -> list[str]:
    """What a valid Tier A carries as a consequence, one `path: message` per warning.

    Seed 002, "Logging": a declined fsync, a broker debug switch nothing records, an https
    address with no proxy trusted, ... are logged at every start as `config_advisory`, the
    same list `crewlet validate` prints. A deployment that has said everything gets none.
    """
    out: list[str] = []
    stream, api, logging, node = cfg.stream, cfg.api, cfg.logging, cfg.node
    if stream.sync != "always":
        out.append(f"stream.sync: {stream.sync}: an acknowledged publish may be up to {stream.sync} behind "
                   "the disk of the member that took it; remove stream.sync to fsync every write")
    if stream.debug and not _records_debug(logging):
        out.append(f"stream.debug: the embedded broker's debug lines are produced and nothing records "
                   f"them (logging.level is {logging.level}); set logging.level: debug, or "
                   "logging.file.level: debug to keep them in the file alone")
    if logging.level == "debug" or logging.file_level == "debug":
        where = "logging.level" if logging.level == "debug" else "logging.file.level"
        out.append(f"{where}: debug records every turn's prompts and tool calls; use info for a node "
                   "that serves a company day to day")
    if stream.cluster is not None:
        out += _cluster_advisories(stream, node)
    if api.port > 0:
        out += _api_advisories(api)
    elif api.public is not None:
        out.append("api.public: api.port: 0 binds nothing, the public listener included; remove "
                   "api.public or give api.port a port")
    return out


def _records_debug(logging) -> bool:
    """True when some destination keeps debug lines (seed 002, "The embedded broker's own logs")."""
    return (logging.stderr and logging.level == "debug") or logging.file_level == "debug"


def _cluster_advisories(stream, node) -> list[str]:
    cluster = stream.cluster
    members, left_out = cluster_members(stream, node.id)
    out = list(left_out)
    if not cluster.host:
        out.append("stream.cluster.host: unset, so the route port binds every interface, and a member "
                   "that joins reads and writes every stream; on a host with a public interface set it "
                   "to the private address (or firewall the port)")
    if node.id_source == "host":
        out.append(f"node.id: unset, so this member is named after its host ({node.id}); a member's name "
                   f"must survive a restart, so set node.id or CREWLET_NODE_ID if the host name may not")
    if members >= 3 and stream.replicas == 1:
        out.append(f"stream.replicas: 1 on a cluster of {members}: losing a member loses a seat's mailbox "
                   "or the fleet's leases with it; set stream.replicas: 3")
    return out


def _api_advisories(api) -> list[str]:
    out: list[str] = []
    url = api.external_url or ""
    if url.startswith("https://") and not api.trusted_proxies:
        out.append("api.trusted_proxies: api.external_url is https and no proxy is trusted, so every "
                   "caller shares the proxy's address (one sign-in throttle for everybody, one client in "
                   "every audit row); name the proxy's address block in api.trusted_proxies")
    if not _is_loopback(api.host) and not url.startswith("https://"):
        out.append(f"api.host: {api.host} serves beyond this host and api.external_url is not https, so "
                   "sign-ins and tokens cross the network in the clear (the engine never terminates TLS); "
                   "put a TLS-terminating proxy in front and give api.external_url its https address")
    if api.public is not None and not api.public.external_url:
        out.append("api.public.external_url: unset: a node with the ingress role refuses to start without "
                   "it, because every webhook it registers is built on it")
    return out
