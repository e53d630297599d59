"""Which fields of a document hold credentials, read from the schema: the one redaction every
rendering of a document goes through, and the rule for `${VAR}` in a document sent over the API.

Seed 002, "The single host": a read-only reader never sees a secret. A field typed
`fields.Secret` carries a `SecretMarker`; nothing here matches key names or lines of text.

`redact_document(text)` composes the document (with the depth and alias budget), walks it
beside the model and replaces the value of every secret field -- in block or flow style,
under a quoted key, as a block scalar, through an anchor or a merge key -- with "[redacted]",
splicing the original text so comments and layout survive. A value that is exactly one
`${NAME}` reference is kept: it names a variable, not a secret. A key the model does not know
has its value redacted too, so an old revision read by a newer schema fails closed.

`api_references(...)` is the policy for a document that arrives over `PUT /config`: a
reference may stand only in a secret field (whose value no reader is shown, so it cannot
disclose the variable), and never names one of the node's own credentials -- the keyring, an
API token or the stream token -- by name or by value, even there (a provider's `api_key` is
sent to the `base_url` the same document names). The file given at boot is the operator's own
and keeps expanding anywhere.
"""
from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterable
from typing import Any, Callable, Union

import yaml
from pydantic import BaseModel
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from engine.config.errors import field_path
from engine.config.fields import SecretMarker
from engine.config.yamlbudget import BudgetedLoader

REDACTED = "[redacted]"
UNREADABLE = "# this revision cannot be read to redact its secrets, so it is not shown\n"
MERGE_TAG = "tag:yaml.org,2002:merge"
# The node's own credentials by name: the keyring's keys, the API tokens and the broker token.
NODE_CREDENTIAL_NAMES = re.compile(r"^CREWLET_(SECRET_KEY|API_TOKEN|NATS_TOKEN)", re.IGNORECASE)
_ONE_REFERENCE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")
_PREFIX = re.compile(r"^((?:[&!]\S*\s+)*)")  # an anchor or a tag before the value: kept
_TRAILING = re.compile(r"\s*$")


# -- the schema -------------------------------------------------------------------------------
def _strip(annotation: Any) -> tuple[Any, list]:
    metadata: list = []
    while typing.get_origin(annotation) is typing.Annotated:
        args = typing.get_args(annotation)
        annotation, metadata = args[0], metadata + list(args[1:])
    return annotation, metadata


def _members(annotation: Any) -> list[tuple[Any, list]]:
    """(type, metadata) of each non-None member of a (possibly optional, possibly union) annotation."""
    bare, metadata = _strip(annotation)
    if typing.get_origin(bare) in (Union, types.UnionType):
        out = []
        for arg in typing.get_args(bare):
            if arg is not type(None):
                inner, more = _strip(arg)
                out.append((inner, metadata + more))
        return out
    return [(bare, metadata)]


def is_secret(annotation: Any) -> bool:
    """Whether the annotation is a `Secret` (optional or not)."""
    return any(isinstance(m, SecretMarker) for _, metadata in _members(annotation) for m in metadata)


def _step(annotations: Iterable[Any], part: Any) -> list[Any]:
    """The annotations one step below `annotations` at key or index `part`."""
    out = []
    for annotation in annotations:
        for bare, _ in _members(annotation):
            origin, args = typing.get_origin(bare), typing.get_args(bare)
            if isinstance(bare, type) and issubclass(bare, BaseModel):
                field = bare.model_fields.get(part) if isinstance(part, str) else None
                if field is not None:
                    out.append(field.rebuild_annotation())
            elif origin is dict and len(args) == 2:
                out.append(args[1])
            elif origin is list and args and isinstance(part, int):
                out.append(args[0])
    return out


def secret_at(model: type[BaseModel], loc: tuple) -> bool:
    """Whether the field at `loc` (keys and list indexes) of `model` is a secret field."""
    annotations: list[Any] = [model]
    for part in loc:
        annotations = _step(annotations, part)
        if not annotations:
            return False
    return any(is_secret(a) for a in annotations)


# -- the parsed document ----------------------------------------------------------------------
class _Walk:
    """Where a composed document's secret values are, and which other scalars share their node."""

    def __init__(self) -> None:
        self.secret: list[Node] = []             # value nodes of secret fields (or of unknown keys)
        self.secret_paths: dict[int, str] = {}   # id(node) -> the secret field it is the value of
        self.plain: list[tuple[str, Node]] = []  # (path, node) of every other scalar

    def walk(self, node: Node, annotations: list[Any], loc: tuple) -> None:
        if any(is_secret(a) for a in annotations):
            self.secret.append(node)
            self.secret_paths.setdefault(id(node), field_path(loc))
            return
        if isinstance(node, MappingNode):
            for key_node, value in node.value:
                if key_node.tag == MERGE_TAG:  # `<<: *base` merges the base's keys here
                    merged = value.value if isinstance(value, SequenceNode) else [value]
                    for base in merged:
                        self.walk(base, annotations, loc)
                    continue
                key = key_node.value if isinstance(key_node, ScalarNode) else None
                below = _step(annotations, key) if key is not None else []
                if not below:  # a key the schema does not know: fail closed
                    self.secret.append(value)
                    continue
                self.walk(value, below, loc + (key,))
        elif isinstance(node, SequenceNode):
            below = _step(annotations, 0)
            if not below:
                self.secret.append(node)
                return
            for index, item in enumerate(node.value):
                self.walk(item, below, loc + (index,))
        else:
            self.plain.append((field_path(loc), node))


def _compose(text: str) -> Node | None:
    return yaml.compose(text, Loader=BudgetedLoader)


def _walked(text: str, model: type[BaseModel]) -> _Walk | None:
    try:
        root = _compose(text)
    except yaml.YAMLError:
        return None
    found = _Walk()
    if root is not None:
        found.walk(root, [model], ())
    return found


def redact_document(text: str, model: type[BaseModel] | None = None) -> str:
    """The document as written, each secret field's value replaced by "[redacted]" (a lone
    `${NAME}` kept); a document that cannot be composed is not shown at all."""
    if model is None:
        from engine.config.company import Company as model  # the company document, by default
    found = _walked(text, model)
    if found is None:
        return UNREADABLE
    spans = []
    for node in found.secret:
        if isinstance(node, ScalarNode) and _ONE_REFERENCE.match(node.value or ""):
            continue
        spans.append((node.start_mark.index, node.end_mark.index))
    out, position = [], 0
    for start, end in sorted(set(spans)):
        if start < position:  # inside a span already redacted (an alias of the same node)
            continue
        chunk = text[start:end]
        out += [text[position:start], _PREFIX.match(chunk).group(1), f'"{REDACTED}"', _TRAILING.search(chunk).group(0)]
        position = end
    out.append(text[position:])
    return "".join(out)


def secret_alias_refusals(text: str, model: type[BaseModel]) -> list[str]:
    """A secret field's value aliased into a field every reader is shown is refused, naming both."""
    found = _walked(text, model)
    if found is None:
        return []
    out = []
    for path, node in found.plain:
        secret = found.secret_paths.get(id(node))
        if secret is not None and (node.value or "") and not _ONE_REFERENCE.match(node.value):
            out.append(f"{path}: an alias of {secret}, a secret field; a secret may stand only in secret "
                       "fields, which no reader is shown")
    return out


# -- references in a document sent over the API -------------------------------------------
ReferencePolicy = Callable[[tuple, str, "str | None"], "str | None"]


def api_references(model: type[BaseModel], node_secrets: Iterable[str]) -> ReferencePolicy:
    """The `${VAR}` rule for a document sent over the API: `policy(loc, name, value)` is None
    when the reference may expand, else the refusal (the caller prefixes the field path)."""
    own = {s for s in node_secrets if s}

    def policy(loc: tuple, name: str, value: str | None) -> str | None:
        if NODE_CREDENTIAL_NAMES.match(name) or (value is not None and value in own):
            return (f"${{{name}}} is one of this node's own credentials (the keyring, an API token or the "
                    "stream token); a company document never reads those")
        if not secret_at(model, loc):
            return (f"${{{name}}} is not expanded in a document sent over the API outside a secret field "
                    "(a webhook secret, a token, a signing secret, an api_key), since every reader is shown "
                    "this field; write the value itself")
        return None

    return policy


def node_secrets(node_config: Any) -> list[str]:
    """Every credential a node config carries: key material, API tokens, the stream token."""
    if node_config is None:
        return []
    values = [k.material for k in node_config.secrets.keys]
    values += [t.token for t in node_config.api.auth.tokens]
    if getattr(node_config.stream, "token", None):
        values.append(node_config.stream.token)
    return values


__all__ = ["REDACTED", "api_references", "is_secret", "node_secrets", "redact_document", "secret_alias_refusals",
           "secret_at"]
