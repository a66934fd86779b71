# SPDX-License-Identifier: GPL-2.0-only
"""Plug-ins chosen by name: congestion controllers (``emu.cc``), path policies
(``emu.paths``).

Why one class: both registries were the same code — a class decorator that refuses a
second class under a taken name, the list of names, and a factory that loads the
built-in modules first and turns an unknown name or a bad parameter into a
``ValueError`` (so a topology file's typo is a one-line error, not a traceback).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Classes with a ``name`` attribute, by name; ``load`` imports the built-in ones."""

    def __init__(self, kind: str, load: Callable[[], None]) -> None:
        self.kind = kind
        self._load = load
        self._classes: dict[str, type[T]] = {}

    def register(self, cls: type[T]) -> type[T]:
        """Class decorator: make ``cls`` available as :meth:`build` ``(cls.name, …)``."""
        name = getattr(cls, "name", "")
        if not name:
            raise ValueError(f"{cls.__name__} has no name")
        if self._classes.get(name, cls) is not cls:
            raise ValueError(f"{self.kind} {name!r} already registered")
        self._classes[name] = cls
        return cls

    def available(self) -> list[str]:
        """Registered names (the built-in modules loaded first)."""
        self._load()
        return sorted(self._classes)

    def build(self, name: str, *args: Any, **params: Any) -> T:
        """An instance of the class registered as ``name``; an unknown name or parameter
        raises ValueError."""
        self._load()
        cls = self._classes.get(name)
        if cls is None:
            raise ValueError(f"unknown {self.kind} {name!r}; have {sorted(self._classes)}")
        try:
            return cls(*args, **params)
        except TypeError as e:
            raise ValueError(f"{name}: {e}") from None
