"""A YAML loader with a budget: how deep a document nests and how many nodes its aliases
expand to, refused by name before anything walks the tree.

Seed 002, "Logging": a document that cannot be used is refused with where and why. A company
document arrives over `PUT /config` from anyone holding an admin token, so what it costs to
read must be bounded before it is read: a 456-byte "billion laughs" (nine aliases of nine
aliases, nine levels deep) reads as a few shared objects but expands to 387 million nodes the
moment anything walks it (the reference expansion, the validators, the digest), and a
100,000-deep flow list overflows the composer's recursion.

The loader is PyYAML's SafeLoader with a guarded composer, rather than ruamel.yaml or
strictyaml: the composer is the one place every alias is resolved and every level entered, so
counting there costs one integer per node and refuses the document part-way, before its tree
exists; ruamel.yaml offers no such limit of its own (its composer would need the same guard),
and strictyaml refuses flow style, which the bundled examples and every test document use.
PyYAML is already the project's YAML library.
"""
from __future__ import annotations

import yaml
from yaml.composer import ComposerError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode

# 64 levels: a company document nests about six deep (org.seats[].placement.labels[]); the
# composer and every validator recurse once a level, so the bound sits far below Python's
# recursion limit whatever a caller's stack already holds.
MAX_DEPTH = 64
# 100,000 nodes once every alias is expanded: a 1,000-seat company with every field written is
# about 20,000; past this the walk, not the text, is what costs (a billion laughs is 10**8).
MAX_EXPANDED_NODES = 100_000


class BudgetExceeded(ComposerError):
    """The document nests too deep or its aliases expand too far; `problem` says which."""


class BudgetedLoader(yaml.SafeLoader):
    """SafeLoader that refuses, by name, a document past MAX_DEPTH or MAX_EXPANDED_NODES."""

    max_depth = MAX_DEPTH
    max_expanded_nodes = MAX_EXPANDED_NODES

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._depth = 0
        self._weights: dict[int, int] = {}   # id(node) -> the node count of its expanded subtree
        self._expanded = 0

    def compose_node(self, parent, index):
        alias = self.check_event(AliasEvent)
        mark = self.peek_event().start_mark
        self._depth += 1
        if self._depth > self.max_depth:
            raise BudgetExceeded(None, None, f"nested deeper than {self.max_depth} levels (the depth budget); "
                                             "a company document is a handful of levels deep", mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if alias:
            weight = self._weights.get(id(node))
            if weight is None:  # the alias names a node still being composed: one of its ancestors
                raise BudgetExceeded(None, None, "an alias refers to a node that contains it (a recursive "
                                                 "document); write the structure out", mark)
        else:
            weight = self._weight(node)
        # An alias adds its whole subtree again; any other node adds itself (its children were
        # counted as they were composed).
        self._expanded += weight if alias else 1
        if self._expanded > self.max_expanded_nodes or weight > self.max_expanded_nodes:
            raise BudgetExceeded(None, None, f"aliases expand to more than {self.max_expanded_nodes} nodes (the alias "
                                             "budget); write the repeated part out, or use fewer aliases", mark)
        return node

    def _weight(self, node: Node) -> int:
        """The node count of `node` with every alias inside it expanded; its children were
        weighed as they were composed."""
        if isinstance(node, SequenceNode):
            children = node.value
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        total = 1 + sum(self._weights[id(child)] for child in children)
        self._weights[id(node)] = total
        return total
