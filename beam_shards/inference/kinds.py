"""A summary of the values of one column (or field, or list items): how many of each kind.

A `Kinds` counts values by kind, and holds a summary of the items of lists (`items`) and one
of each key of objects (`fields`). It holds no values, only the distinct ones of a label
column, so it stays small however many rows it summarizes. Summaries `merge` in any order
and grouping to the same summary, so they combine across record batches and workers; a
table's summary is the summary of its rows as objects, a field for each column.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# Where a key was first seen: the batch's place in the input (its `origin`), then the row in
# it and the key's place in the row. Only the order of the features' fields depends on it.
First = tuple


@dataclasses.dataclass
class Kinds:
    """How many values of each kind a column holds.

    Every value counts in `rows`, and in exactly one of the counts from `nulls` to `objects`:
    a null, a value a row or object lacks (`absent`), or the kind it holds. `strings` counts
    the strings that are none of the kinds before it (dates, datetimes, numbers in CSV cells).

    Attributes:
      cells: how many of the values came from CSV cells (text, which any kind may widen to).
      negative, over_int64, beyond_64_bits: whether an int is below 0, above int64's largest,
        or outside both int64 and uint64.
      zoned: datetimes with a time zone (`datetimes` counts those without).
      image_paths: how many of the strings end in an image file extension.
      items: the items of all the lists, None when no list holds any.
      fields: each key of the objects, a value counted `absent` for each object that lacks it.
      labels: the distinct values, for a label column (None when not asked for).
      first: where the column was first seen (see `First`); not compared.
    """

    rows: int = 0
    nulls: int = 0
    absent: int = 0
    bools: int = 0
    ints: int = 0
    floats: int = 0
    dates: int = 0
    datetimes: int = 0
    zoned: int = 0
    strings: int = 0
    lists: int = 0
    objects: int = 0
    cells: int = 0
    image_paths: int = 0
    negative: bool = False
    over_int64: bool = False
    beyond_64_bits: bool = False
    items: Kinds | None = None
    fields: dict[str, Kinds] = dataclasses.field(default_factory=dict)
    labels: frozenset | None = None
    first: First | None = dataclasses.field(default=None, compare=False)

    @property
    def present(self) -> int:
        """How many values are neither null nor absent."""
        return self.rows - self.nulls - self.absent


_COUNTS = ("rows", "nulls", "absent", "bools", "ints", "floats", "dates", "datetimes", "zoned", "strings", "lists",
           "objects", "cells", "image_paths")
_FLAGS = ("negative", "over_int64", "beyond_64_bits")


_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1


def note_int_range(kinds: Kinds, low: int, high: int) -> None:
    """Notes in `kinds` that its ints reach down to `low` and up to `high`."""
    kinds.negative = kinds.negative or low < 0
    kinds.over_int64 = kinds.over_int64 or high > _INT64_MAX
    kinds.beyond_64_bits = kinds.beyond_64_bits or high > _UINT64_MAX or low < -_INT64_MAX - 1


def absent(count: int) -> Kinds:
    """The summary of a column `count` rows lack."""
    return Kinds(rows=count, absent=count)


def merge(a: Kinds, b: Kinds) -> Kinds:
    """The summary of the values of `a` and of `b` together. `Kinds()` summarizes nothing:
    merging it changes nothing.

    Example:
        >>> merged = merge(Kinds(rows=2, ints=2), Kinds(rows=1, floats=1))
        >>> merged.rows, merged.ints, merged.floats
        (3, 2, 1)
    """
    values: dict[str, Any] = {name: getattr(a, name) + getattr(b, name) for name in _COUNTS}
    values.update({name: getattr(a, name) or getattr(b, name) for name in _FLAGS})
    values["items"] = a.items if b.items is None else b.items if a.items is None else merge(a.items, b.items)
    values["fields"] = {key: merge(a.fields.get(key) or absent(a.objects), b.fields.get(key) or absent(b.objects))
                        for key in {**a.fields, **b.fields}}
    values["labels"] = a.labels if b.labels is None else b.labels if a.labels is None else a.labels | b.labels
    firsts = [first for first in (a.first, b.first) if first is not None]
    values["first"] = min(firsts) if firsts else None
    return Kinds(**values)


def merge_all(summaries: list[Kinds]) -> Kinds:
    """The summaries merged into one (`Kinds()` for none)."""
    merged = Kinds()
    for summary in summaries:
        merged = merge(merged, summary)
    return merged


def kinds_found(kinds: Kinds) -> str:
    """The kinds of values a summary holds, in words (`"ints and text"`)."""
    found = [name for name, count in (
        ("bools", kinds.bools), ("ints", kinds.ints), ("floats", kinds.floats), ("dates", kinds.dates),
        ("datetimes", kinds.datetimes + kinds.zoned), ("text" if kinds.cells else "strings", kinds.strings),
        ("lists", kinds.lists), ("objects", kinds.objects)) if count]
    return " and ".join(found)
