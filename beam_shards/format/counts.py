"""How large a count (rows, bytes, shards, versions) a manifest may hold, and the check of one.

2**62 leaves room to add a few counts in int64 (numpy, Arrow) without overflow.
"""

from __future__ import annotations

from typing import Any

MAX_COUNT = 2**62


def is_count(value: Any) -> bool:
    """Whether `value` is an int (not a bool) from 0 to below MAX_COUNT."""
    return type(value) is int and 0 <= value < MAX_COUNT


def are_counts(values: list[Any]) -> bool:
    """Whether every item of `values` is a count, as `is_count` says, checked at C speed: a call of
    `is_count` per item cost 0.1 ms over a label's 1,000 class counts, on every open."""
    return not values or set(map(type, values)) == {int} and min(values) >= 0 and max(values) < MAX_COUNT
