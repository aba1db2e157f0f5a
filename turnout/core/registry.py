"""Name → component registries, one per simulation seam.

Config files name components (``selector: {name: uniform}``); a :class:`Registry` maps those
names to classes, so adding an algorithm means adding one module that registers itself, never
an ``if/elif`` over names. Each registered class carries a pydantic ``Config`` model holding its
options, and the first line of its docstring is the description that ``turnout list`` prints.
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from .errors import ConfigError

T = TypeVar("T")


class DuplicateName(ValueError):
    """A second component registered under a name its seam already has (a plugin clashing with a built-in)."""

    def __init__(self, seam: str, name: str):
        self.seam, self.name = seam, name
        super().__init__(f"{seam} {name!r} registered twice")


class Registry(Generic[T]):
    """A named collection of components for one seam (e.g. ``selector``)."""

    def __init__(self, seam: str, doc: str):
        self.seam = seam
        self.doc = doc
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise DuplicateName(self.seam, name)
            self._items[name] = obj
            obj.registry_name = name  # type: ignore[attr-defined]
            return obj

        return deco

    def get(self, name: str, key: str | None = None) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise ConfigError(key or f"{self.seam}.name", name,
                              f"unknown {self.seam}; choose one of: {', '.join(self.names())}") from None

    def remove(self, name: str) -> None:
        """Forget a component (a plugin that failed to load takes back what it registered)."""
        self._items.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[tuple[str, T]]:
        return iter(sorted(self._items.items()))


def describe(obj: object) -> str:
    """First line of a component's docstring: the one-line description ``turnout list`` shows."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""
