"""How large a count (rows, bytes, shards, versions) a manifest may hold, and the check of one.

2**62 leaves room to add a few counts in int64 (numpy, Arrow) without overflow.
"""

from __future__ import annotations

from typing import Any

MAX_COUNT = 2**62


def is_count(value: Any) -> bool:
    """Whether `value` is an int (not a bool) from 0 to below MAX_COUNT."""
    return type(value) is int and 0 <= value < MAX_COUNT
