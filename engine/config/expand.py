"""`${VAR}` references, expanded before a document is decoded.

Seed 002, "Every node embeds a member of one cluster": Tier A expands `${VAR}` references
before it decodes. Into a text field a reference expands anywhere in the value; into a
number or a boolean (a port, `stream.replicas`) it must be the whole value, and what it
resolves to is read as if it were written there. The company document takes the same
references (its integration secrets are `${GITHUB_WEBHOOK_SECRET}` and the like).

Spellings: `${NAME}` (refused, naming the field, when NAME is not set), `${NAME:-default}`
(the default when NAME is unset or empty, as in a shell) and `$${` for a literal `${`.
Only values expand, never mapping keys.

A value that was exactly one reference comes back as a `WholeReference` and one that
carried references inside other text as an `EmbeddedReferences`: both are `str`, and the
field types in `fields.py` read them (a number parses a whole reference as YAML would
have, and refuses an embedded one).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Callable

from engine.config.errors import field_path

# policy(loc, name, value) -> None when the reference may expand, else the refusal.
Policy = Callable[[tuple, str, "str | None"], "str | None"]

_TOKEN = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_BODY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?$", re.DOTALL)


class WholeReference(str):
    """A value that was one `${VAR}` reference; `.reference` is what the file said."""

    reference: str

    def __new__(cls, value: str, reference: str) -> "WholeReference":
        obj = super().__new__(cls, value)
        obj.reference = reference
        return obj


class EmbeddedReferences(str):
    """Text with references inside it; `.reference` is what the file said."""

    reference: str

    def __new__(cls, value: str, reference: str) -> "EmbeddedReferences":
        obj = super().__new__(cls, value)
        obj.reference = reference
        return obj


class Expansion:
    """The expanded tree, the refusals met on the way, and the paths they were met at."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.failed_paths: list[str] = []

    def refuse(self, loc: tuple, message: str) -> None:
        path = field_path(loc)
        self.problems.append(f"{path}: {message}")
        self.failed_paths.append(path)


def expand_references(tree: Any, env: Mapping[str, str] | None = None,
                      policy: Policy | None = None) -> tuple[Any, Expansion]:
    """Return (tree with every string value expanded, Expansion with the refusals).

    An unset variable with no default expands to "" so decoding can go on; the refusal
    naming it is in `Expansion.problems`, and its path in `failed_paths` lets the caller
    drop the follow-on complaints about the same field. `policy` may refuse a reference by
    where it stands and what it names (a document sent over the API: `secretfields`); a
    refused reference expands to "" and is refused the same way.
    """
    source = os.environ if env is None else env
    result = Expansion()
    return _walk(tree, (), source, result, policy), result


def _walk(node: Any, loc: tuple, env: Mapping[str, str], result: Expansion, policy: Policy | None) -> Any:
    if isinstance(node, dict):
        return {key: _walk(value, loc + (key,), env, result, policy) for key, value in node.items()}
    if isinstance(node, list):
        return [_walk(value, loc + (i,), env, result, policy) for i, value in enumerate(node)]
    if isinstance(node, str) and "$" in node:
        return _expand_text(node, loc, env, result, policy)
    return node


def _expand_text(text: str, loc: tuple, env: Mapping[str, str], result: Expansion, policy: Policy | None = None) -> str:
    pieces: list[str] = []
    position = 0
    references = 0
    whole = False
    for match in _TOKEN.finditer(text):
        pieces.append(text[position:match.start()])
        position = match.end()
        token = match.group(0)
        if token == "$${":
            pieces.append("${")
            continue
        if match.group(1) is None:
            result.refuse(loc, f"{text!r} has a `${{` with no closing `}}`; write $${{ for a literal ${{")
            return ""
        body = _BODY.match(match.group(1))
        if body is None:
            result.refuse(loc, f"{token} is not a reference: expected ${{NAME}} or ${{NAME:-default}}")
            return ""
        references += 1
        whole = match.start() == 0 and match.end() == len(text)
        name, default = body.group(1), body.group(2)
        value = env.get(name)
        refusal = policy(loc, name, value) if policy is not None else None
        if refusal is not None:
            result.refuse(loc, refusal)
            return ""
        if value is None or (value == "" and default is not None):
            if default is None:
                result.refuse(loc, f"${{{name}}} is not set in the environment")
                value = ""
            else:
                value = default
        pieces.append(value)
    pieces.append(text[position:])
    expanded = "".join(pieces)
    if references == 0:
        return expanded
    if whole:
        return WholeReference(expanded, text)
    return EmbeddedReferences(expanded, text)
