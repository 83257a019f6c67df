"""The one registry idiom of every level: policies (``gpusched.baselines.POLICIES``), sharing mechanisms
(``gpusched_env.device.mechanisms.MECHANISMS``) and pipeline schedules
(``gpusched_env.pipeline.schedules.SCHEDULES``).

A :class:`Registry` maps a name to what builds it, with a one-line summary and the module whose code
implements it; ``gpusched.bench.doc_tables`` renders README's policy tables from these entries. Adding a
policy, mechanism or schedule is its own file plus one registration line (``REG.add(...)`` or the
``@REG.register(...)`` decorator); an unknown name is a ``ValueError`` listing the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered name: the object (a factory or a schedule), what it does, where its code is."""

    name: str
    obj: T
    summary: str
    module: str  # dotted name of the module that implements it


class Registry(Mapping[str, T]):
    """Name -> registered object, in registration order (a read-only mapping of the objects)."""

    def __init__(self, kind: str, plural: str | None = None) -> None:
        self.kind, self.plural = kind, plural or f"{kind}s"
        self._entries: dict[str, Entry[T]] = {}

    def add(self, name: str, obj: T, summary: str = "", module: str | None = None) -> T:
        """Register ``obj`` as ``name``; ``module`` defaults to the object's own module."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered already")
        mod = module or getattr(obj, "__module__", None) or type(obj).__module__
        self._entries[name] = Entry(name, obj, summary, mod)
        return obj

    def register(self, name: str, summary: str = "", module: str | None = None) -> Callable[[T], T]:
        """Decorator form of :meth:`add`."""
        return lambda obj: self.add(name, obj, summary, module)

    def remove(self, name: str) -> None:
        """Unregister ``name`` (a plug-in, or a test's toy entry)."""
        del self._entries[name]

    def lookup(self, name: str) -> T:
        """The object registered as ``name``; a ValueError listing the known names otherwise."""
        entry = self._entries.get(name)
        if entry is None:
            raise ValueError(f"unknown {self.kind} {name!r}; known {self.plural}: {', '.join(self._entries)}")
        return entry.obj

    def entry(self, name: str) -> Entry[T]:
        self.lookup(name)
        return self._entries[name]

    def entries(self) -> list[Entry[T]]:
        return list(self._entries.values())

    def __getitem__(self, name: str) -> T:
        return self._entries[name].obj

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
