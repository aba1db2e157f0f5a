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

YAML 1.1's other types have no place in an experiment, and PyYAML would build Python objects that no option
accepts and no run folder can record (``seeds: !!set {1, 2}`` became a set that pydantic took as a list and
``config.yaml`` could not write). So ``!!set``, ``!!omap``, ``!!pairs``, ``!!binary`` and ``!!timestamp`` are
refused while composing, naming the key and the plain YAML to write instead, and a date written without a tag
(``name: 2021-01-01``) is read as the text it is, never as a ``datetime``. Anchors, aliases and merge keys
(``<<: *base``, ``<<: [*a, *b]``) are plain YAML and stay accepted.
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
        _refuse_tags(node, "", set())
        return node


_BoundedLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXP_FLOAT, list("-+0123456789"))
# Dates without a tag stay text (add_implicit_resolver above gave the loader its own copy of the resolvers).
for _first, _resolvers in _BoundedLoader.yaml_implicit_resolvers.items():
    _resolvers[:] = [r for r in _resolvers if r[0] != "tag:yaml.org,2002:timestamp"]

#: YAML 1.1 types an experiment cannot hold → (what it is, what to write instead).
REFUSED_TAGS = {
    "tag:yaml.org,2002:set": ("a set (!!set)", "write a list instead, e.g. [1, 2]"),
    "tag:yaml.org,2002:omap": ("an ordered mapping (!!omap)", "write a plain mapping (keys keep their order)"),
    "tag:yaml.org,2002:pairs": ("a list of pairs (!!pairs)", "write a plain mapping"),
    "tag:yaml.org,2002:binary": ("binary data (!!binary)", "write the value as text; bulk data belongs in a data file"),
    "tag:yaml.org,2002:timestamp": ("a timestamp (!!timestamp)", "write the date as text, e.g. '2021-01-01'"),
}


def _refuse_tags(node: Node, key: str, seen: set[int]) -> None:
    """Refuse a node tagged with one of :data:`REFUSED_TAGS`, naming its dotted key (``seeds``, ``variants[1].set``)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    refused = REFUSED_TAGS.get(node.tag)
    if refused is not None:
        what, fix = refused
        raise BadYaml(f"{key or 'the value'} is {what}, which an experiment cannot hold; {fix}",
                      node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, SequenceNode):
        for i, child in enumerate(node.value):
            _refuse_tags(child, f"{key}[{i}]", seen)
    elif isinstance(node, MappingNode):
        for k, v in node.value:
            name = str(k.value) if isinstance(k.value, str) else "?"
            _refuse_tags(k, f"{key}.{name}" if key else name, seen)
            _refuse_tags(v, f"{key}.{name}" if key else name, seen)


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
