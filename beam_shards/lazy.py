"""Package faces that import a module only when one of its names is first asked for.

Every face of the package is lazy, for two reasons: training code never pays for modules
it does not use (apache_beam, torch), and a face that imported its own modules would form
an import cycle with each of them. Python's per-module import locks turn such a cycle into a
deadlock (`_DeadlockError`, or "cannot import name ... from partially initialized module")
when two threads import two of the modules at once, as Beam's SDK workers do when they
unpickle several steps of a pipeline in parallel.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `modules[name]` (a module path) on first use.

    The value is then set on the package, so later lookups do not come back here.

    Example:
        >>> __getattr__ = lazy_names("beam_shards", {"ShardedDataLoader": "beam_shards.read.loader"})
    """

    def __getattr__(name: str) -> Any:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(modules[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
