"""YAML from users, read with bounds: no control characters, no deep nesting, no alias bombs.

``yaml.safe_load`` executes nothing, but a small file can still hurt: 1,000 nested brackets
overflow the composer's recursion, and a 1 KB "billion laughs" file (anchors whose aliases
reference each other) loads into a few shared objects whose *expansion* — what ``repr``, ``json``
or a validator walk — has 10^9 nodes. Here the text is checked for characters YAML forbids (with
their line and column), nesting is bounded while composing, and the document's expanded size
and depth (every alias counted as the node it points at) are measured before any Python object
is built. Everything that goes wrong becomes one :class:`BadYaml` with a one-line problem.

Scalars follow PyYAML's YAML 1.1 rules with one YAML 1.2 addition: exponent floats without a dot
(``1e-3``, ``2E6``) are numbers, not strings, so ``lr: 1e-3`` and ``num_clients: 1e6`` mean what
they say (an integer option accepts ``1e6`` because it is integral; ``2.5`` is refused).
"""

from __future__ import annotations

import re

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

#: Deepest nesting of mappings/sequences (an experiment file needs about 5).
MAX_DEPTH = 32
#: Most nodes once every alias is expanded (a per-client list of 10^5 probabilities fits).
MAX_NODES = 1_000_000
#: Largest text accepted, in characters.
MAX_CHARS = 16 << 20

# What YAML 1.1 allows in a stream (PyYAML's Reader.NON_PRINTABLE, inverted).
_FORBIDDEN = re.compile("[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010FFFF]")
_EXP_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


class BadYaml(Exception):
    """Text that is not acceptable YAML input; ``problem`` is one line, ``where`` names line/column."""

    def __init__(self, problem: str, line: int | None = None, column: int | None = None):
        self.problem = " ".join(str(problem).split())
        self.where = f" (line {line}, column {column})" if line is not None else ""
        super().__init__(self.problem + self.where)


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses nesting deeper than :data:`MAX_DEPTH` while composing."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise BadYaml(f"nested more than {MAX_DEPTH} levels deep; an experiment file needs a handful",
                              mark.line + 1, mark.column + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self):
        node = super().compose_document()
        _measure(node, 1, {}, set())
        return node


_BoundedLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXP_FLOAT, list("-+0123456789"))


def _measure(node: Node, depth: int, memo: dict[int, tuple[int, int]], path: set[int]) -> tuple[int, int]:
    """(expanded node count, expanded depth) of ``node``, aliases counted as what they point at."""
    key = id(node)
    if key in path:
        raise BadYaml("an alias refers to a node that contains it (a recursive structure)",
                      node.start_mark.line + 1, node.start_mark.column + 1)
    if key not in memo:
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        size, deepest = 1, 0
        path.add(key)
        for child in children:
            s, d = _measure(child, depth + 1, memo, path)
            size, deepest = size + s, max(deepest, d)
            if size > MAX_NODES:
                raise BadYaml(f"expands to more than {MAX_NODES:,} values (aliases counted as what they repeat)",
                              node.start_mark.line + 1, node.start_mark.column + 1)
        path.discard(key)
        memo[key] = (size, deepest + 1)
    size, own_depth = memo[key]
    if depth - 1 + own_depth > MAX_DEPTH:
        raise BadYaml(f"nested more than {MAX_DEPTH} levels deep once aliases are expanded",
                      node.start_mark.line + 1, node.start_mark.column + 1)
    return memo[key]


def check_text(text: str) -> None:
    """Refuse text YAML does not allow (NUL, other control characters), naming line and column."""
    if len(text) > MAX_CHARS:
        raise BadYaml(f"is {len(text):,} characters long; the limit is {MAX_CHARS:,} (put bulk data in a data file)")
    bad = _FORBIDDEN.search(text)
    if bad is not None:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise BadYaml(f"contains the character U+{ord(bad.group()):04X}, which YAML does not allow (control "
                      "characters such as NUL or ESC, surrogates); remove it", line, column)


def load(text: str):
    """The single YAML document in ``text`` as Python objects, or :class:`BadYaml`."""
    check_text(text)
    try:
        return yaml.load(text, Loader=_BoundedLoader)
    except BadYaml:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise BadYaml(f"is not valid YAML: {problem}", *((mark.line + 1, mark.column + 1) if mark else ())) from None
    except yaml.YAMLError as exc:
        raise BadYaml(f"is not valid YAML: {exc}") from None
    except (ValueError, OverflowError, TypeError) as exc:
        # a scalar that matches a YAML type but cannot be built: 2021-13-45, a 5,000-digit integer
        raise BadYaml(f"has a value that cannot be read: {exc}") from None
