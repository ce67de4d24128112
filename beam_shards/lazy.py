"""Faces that import a heavy module only when one of its names is first asked for."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `modules[name]` (a module path) on first use.

    Example:
        >>> __getattr__ = lazy_names("beam_shards", {"ShardedDataLoader": "beam_shards.read.loader"})
    """

    def __getattr__(name: str) -> Any:
        if name in modules:
            return getattr(importlib.import_module(modules[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
