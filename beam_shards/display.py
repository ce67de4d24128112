"""Short text forms for people: sizes in decimal units, and values cut to a length.

Used in error messages (`short_repr`, `printable`, `few` names of many), by the command line and by each
feature kind's `describe`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# How many names a message lists before "and N more": an input may hold a hundred thousand.
_SHOWN_NAMES = 5


def human_size(num_bytes: float) -> str:
    """`num_bytes` in decimal units: 512 B, 2.1 kB, 14.2 MB, 1.3 GB."""
    if abs(num_bytes) < 1000:
        return f"{num_bytes:,.0f} B"
    for unit in ("kB", "MB", "GB"):
        num_bytes /= 1000
        if abs(num_bytes) < 1000:
            return f"{num_bytes:,.1f} {unit}"
    return f"{num_bytes / 1000:,.1f} TB"


def clip(text: str, limit: int = 80) -> str:
    """`text` cut to `limit` characters, ending in "..." when it was cut."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def few(names: Iterable[Any], shown: int = _SHOWN_NAMES) -> str:
    """The first `shown` of `names` (each as `repr`, cut to 40 characters), then how many
    more: `'a', 'b' and 3 more`."""
    names = list(names)
    listed = ", ".join(clip(repr(name), 40) for name in names[:shown])
    return listed + (f" and {len(names) - shown:,} more" if len(names) > shown else "")


def printable(text: str) -> str:
    """`text` with each character a terminal would act on (escape sequences and other
    control characters, bidirectional overrides, line separators) shown escaped, as
    `\\x1b` or `\\u202e`, so that what a cache holds cannot rewrite the terminal nor
    break a message into lines."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def short_repr(value: Any, limit: int = 80) -> str:
    """`repr` of a value cut to `limit` characters, with its type for bytes and arrays."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        head = bytes(value[:16])
        return f"{type(value).__name__} of length {len(value)} starting {head!r}"
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        if tuple(shape) == () and hasattr(value, "item"):  # a numpy scalar: its value says more
            return f"{type(value).__name__} {clip(repr(value.item()), limit)}"
        return f"{type(value).__name__} of shape {tuple(shape)} and dtype {dtype}"
    return f"{type(value).__name__} {clip(repr(value), limit)}"


def preview_example(example: Any, fields: int = 3) -> str:
    """A short description of an example for errors: its first few scalar fields."""
    if not isinstance(example, dict):
        return f"{type(example).__name__} value"
    shown = {k: v for k, v in example.items() if isinstance(v, (int, float)) or isinstance(v, str) and len(v) <= 80}
    if not shown:
        return f"example with fields {list(example)[:8]}"
    return repr(dict(list(shown.items())[:fields]))
