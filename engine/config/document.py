"""Reading a YAML document and decoding it block by block, collecting every refusal.

Seed 002, "Logging": a file is "refused, with the field path, by crewlet validate and at
boot". A document is read (YAML, a duplicate key refused with its line), its `${VAR}`
references expanded (`expand.py`), then each top-level block decoded on its own, so a
typo in `api` does not hide a refusal in `stream`. Pydantic's errors are rewritten here
into `path: expected ..., got ...`; no pydantic wording or URL reaches an operator.
"""
from __future__ import annotations

import difflib
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from engine.config.errors import ConfigFileError, describe_value, field_path
from engine.config.expand import expand_references
from engine.config.fields import Expect
from engine.config.yamlbudget import BudgetedLoader, BudgetExceeded


class _UniqueKeyLoader(BudgetedLoader):
    """A SafeLoader with the depth and alias budget (`yamlbudget`) that also refuses a mapping
    naming one key twice (the second would win silently)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"the key {key!r} appears twice in one mapping", key_node.start_mark)
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(text: str, source: str) -> dict:
    """Parse text as one YAML mapping; ConfigFileError naming source:line:column otherwise
    (past the depth or alias budget too, naming which).

    An empty document reads as an empty mapping (every block takes its defaults).
    """
    try:
        tree = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        if isinstance(exc, BudgetExceeded):
            raise ConfigFileError([f"{where}: refused: {problem}"]) from None
        raise ConfigFileError([f"{where}: not valid YAML: {problem}"]) from None
    if tree is None:
        return {}
    if not isinstance(tree, dict):
        raise ConfigFileError([f"{source}: expected a mapping of blocks at the top level, got {describe_value(tree)}"])
    return tree


def read_file(path: str | os.PathLike) -> str:
    """The file's text; ConfigFileError naming the path when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigFileError([f"{os.fspath(path)}: no such file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigFileError([f"{os.fspath(path)}: cannot be read: {reason}"]) from None


class Decoded:
    """The outcome of decoding one document: its blocks, and every problem met."""

    def __init__(self) -> None:
        self.blocks: dict[str, Any] = {}
        self.problems: list[str] = []
        self.reference_problems: list[str] = []
        self.failed_paths: list[str] = []
        self.expanded: dict[str, Any] = {}  # the document after `${VAR}` expansion, for salvaging a failed block
        self.complete = True

    def add(self, problems: list[str]) -> None:
        self.problems.extend(problems)

    def kept_problems(self, more: list[str] = ()) -> list[str]:
        """The reference refusals, then the rest (self's and `more`), less repeats and the
        follow-on complaints about a field a reference already failed (an unset `${VAR}`
        reads as "", which every rule would otherwise call empty or too short)."""
        out: list[str] = list(self.reference_problems)
        for problem in [*self.problems, *more]:
            path = problem.split(": ", 1)[0]
            follow_on = any(path == p or path.startswith((p + ".", p + "[")) for p in self.failed_paths)
            if not follow_on and problem not in out:
                out.append(problem)
        return out


def decode_document(model: type[BaseModel], tree: dict, env: Mapping[str, str] | None, policy=None) -> Decoded:
    """Expand references in tree (each one `policy` allows, when given), then decode each of
    model's top-level fields on its own.

    `blocks` holds every block that decoded, an absent one as its default, so rules can
    judge the blocks that are sound; `complete` is True when none failed.
    """
    result = Decoded()
    expanded, expansion = expand_references(tree, env, policy)
    result.reference_problems = expansion.problems
    result.failed_paths = expansion.failed_paths
    result.expanded = expanded if isinstance(expanded, dict) else {}
    for key in expanded:
        if key not in model.model_fields:
            result.add([f"{field_path((key,))}: {_unknown(key, model)}"])
            result.complete = False
    for name, info in model.model_fields.items():
        if expanded.get(name) is None:  # absent, or written with nothing after it
            if info.is_required():
                result.add([f"{field_path((name,))}: missing: expected {_expected(info)}"])
                result.complete = False
            else:
                result.blocks[name] = info.get_default(call_default_factory=True)
            continue
        annotation = info.rebuild_annotation()
        try:
            result.blocks[name] = TypeAdapter(annotation).validate_python(expanded[name])
        except ValidationError as exc:
            result.add(problems_from(exc, annotation, (name,)))
            result.complete = False
    return result


def problems_from(exc: ValidationError, annotation: Any, prefix: tuple = ()) -> list[str]:
    """Rewrite a pydantic ValidationError as `path: message` lines in our wording."""
    out = []
    for error in exc.errors(include_url=False):
        raw_loc = tuple(error["loc"])
        if raw_loc[-1:] == ("[key]",):  # a mapping key that failed: the key itself is the path
            raw_loc = raw_loc[:-2] + (error.get("input"),)
        loc, target, metadata = _resolve(annotation, raw_loc)
        out.append(_problem(error, prefix + loc, target, metadata))
    return out


def _problem(error: dict, loc: tuple, target: Any, metadata: list) -> str:
    kind, value = error["type"], error.get("input")
    path = field_path(loc)
    if kind == "config":
        return f"{path}: {error['msg']}"
    if kind == "missing":
        expect = next((m.text for m in metadata if isinstance(m, Expect)), None)
        if _is_model(target):
            expect = "a mapping"
        return f"{path}: missing: expected {expect}" if expect else f"{path}: missing"
    if kind == "extra_forbidden":
        parent = next((m.model for m in metadata if isinstance(m, _Parent)), None)
        return f"{path}: {_unknown(loc[-1], parent)}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{path}: expected a mapping, got {describe_value(value)}"
    if kind in ("list_type", "tuple_type"):
        return f"{path}: expected a list, got {describe_value(value)}"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        tags = ", ".join(_tags(target))
        tag = error.get("ctx", {}).get("tag")
        got = describe_value(tag) if kind == "union_tag_invalid" else "nothing"
        return f"{path}.kind: expected one of {tags}, got {got}"
    expect = next((m.text for m in metadata if isinstance(m, Expect)), None)
    return f"{path}: expected {expect or 'a value this field accepts'}, got {describe_value(value)}"


def _expected(info: Any) -> str:
    target, metadata = _strip(info.rebuild_annotation())
    if _is_model(target):
        return "a mapping"
    return next((m.text for m in metadata if isinstance(m, Expect)), "a value")


def _unknown(key: Any, model: Any) -> str:
    names = list(model.model_fields) if _is_model(model) else []
    message = "unknown field"
    close = difflib.get_close_matches(str(key), names, n=1)
    if close:
        return f"{message} (did you mean {close[0]}?)"
    if names:
        return f"{message}; expected one of {', '.join(names)}"
    return message


def _is_model(target: Any) -> bool:
    return isinstance(target, type) and issubclass(target, BaseModel)


def _tags(target: Any) -> list[str]:
    tags: list[str] = []
    for member in _union_members(target):
        field = member.model_fields.get("kind") if _is_model(member) else None
        if field is not None:
            tags.extend(typing.get_args(field.annotation))
    return tags


def _strip(annotation: Any) -> tuple[Any, list]:
    metadata: list = []
    while typing.get_origin(annotation) is typing.Annotated:
        args = typing.get_args(annotation)
        annotation, metadata = args[0], metadata + list(args[1:])
    return annotation, metadata


def _union_members(annotation: Any) -> list:
    annotation, _ = _strip(annotation)
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [_strip(a)[0] for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _resolve(annotation: Any, loc: tuple) -> tuple[tuple, Any, list]:
    """Walk loc through annotation: (loc without union tags, the type reached, its metadata).

    The metadata ends with a `_Parent` naming the type the last step was taken from: for
    an unknown key that is the model that refused it, whose fields a suggestion names.
    """
    clean: list = []
    current, metadata = _strip(annotation)
    parent: Any = None
    for part in loc:
        members = _union_members(current)
        if len(members) > 1 and isinstance(part, str):
            chosen = next((m for m in members if _is_model(m) and part in _tags(m)), None)
            if chosen is not None:
                current = chosen
                continue
        if len(members) == 1:
            current = members[0]
        parent = current
        clean.append(part)
        origin, args = typing.get_origin(current), typing.get_args(current)
        if _is_model(current) and part in current.model_fields:
            current, metadata = _strip(current.model_fields[part].rebuild_annotation())
        elif origin is list and args and isinstance(part, int):
            current, metadata = _strip(args[0])
        elif origin is dict and len(args) == 2:
            current, metadata = _strip(args[1])
        else:
            current, metadata = None, []
    if current is not None and len(_union_members(current)) == 1:
        current = _union_members(current)[0]
    return tuple(clean), current, metadata + [_Parent(parent)]


class _Parent:
    def __init__(self, model: Any) -> None:
        self.model = model


def salvage_items(model: type[BaseModel], raw: Any, stand_in: Any = None) -> list[Any]:
    """The items of a refused list block, each decoded on its own, in their places: an item that
    does not decode is `stand_in(item)` (None without one). When one seat of `org.seats` is
    refused, the rest -- and what can be read of it -- still stand for the cross-field rules,
    so every problem is reported in one pass rather than the references after a second."""
    if not isinstance(raw, list):
        return []
    adapter = TypeAdapter(model)
    out = []
    for item in raw:
        try:
            out.append(adapter.validate_python(item))
        except ValidationError:
            out.append(stand_in(item) if stand_in is not None else None)
    return out
