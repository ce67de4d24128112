"""Summaries of Python values, as a JSON parser gives them: None, bools, ints, floats, strings,
lists and dicts. Lists and dicts are summarized a level at a time (the items of all lists
together, the values of each key together), so the work grows with the values, and the
recursion with their depth, which `MAX_DEPTH` bounds."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import pyarrow as pa

from beam_shards.errors import FeatureError
from beam_shards.features import MAX_DEPTH
from beam_shards.inference.kinds import First, Kinds, merge, note_int_range
from beam_shards.inference.strings import classify_strings


def check_level(path: str, level: int) -> None:
    """Raises FeatureError when lists or objects at `path` nest `level` levels, past `MAX_DEPTH`."""
    if level > MAX_DEPTH:
        raise FeatureError(f"{path!r} nests lists and objects deeper than the {MAX_DEPTH} levels an input may")


def summarize_values(values: Sequence[Any], *, labels: bool = False, paths: bool = False, origin: First = (),
                     path: str = "value", level: int = 0) -> Kinds:
    """The summary of Python values (of a column named `path`, `level` lists or objects deep).

    Example:
        >>> kinds = summarize_values([1, 2.5, None, "2024-01-31", [1], {"a": True}])
        >>> kinds.ints, kinds.floats, kinds.nulls, kinds.dates, kinds.lists, kinds.fields["a"].bools
        (1, 1, 1, 1, 1, 1)

    Args:
      labels: keep the distinct values (of a label column).
      paths: count the strings that end in an image file extension.
      origin: where the values are in the input (see `kinds.First`).

    Raises:
      FeatureError: lists or objects nested deeper than `MAX_DEPTH` levels.
      TypeError: a value no JSON parser gives.
    """
    kinds = Kinds(rows=len(values))
    ints: list[int] = []
    strings: list[str] = []
    lists: list[list] = []
    objects: list[dict] = []
    for value in values:
        kind = type(value)
        if value is None:
            kinds.nulls += 1
        elif kind is bool:
            kinds.bools += 1
        elif kind is int:
            ints.append(value)
        elif kind is float:
            kinds.floats += 1
        elif kind is str:
            strings.append(value)
        elif kind is list:
            lists.append(value)
        elif kind is dict:
            objects.append(value)
        else:
            raise TypeError(f"{path!r} holds a {kind.__name__} value, which no JSON parser gives")
    kinds.ints, kinds.lists, kinds.objects = len(ints), len(lists), len(objects)
    if ints:
        note_int_range(kinds, min(ints), max(ints))
    if strings:
        _classify(strings, kinds, paths)
    if lists or objects:
        check_level(path, level + 1)
    items = [item for value in lists for item in value]
    if items:
        kinds.items = summarize_values(items, origin=origin, path=f"{path}[]", level=level + 1)
    if objects:
        kinds.fields = fields_of_objects(objects, origin, path, level + 1)
    if labels:
        kinds.labels = frozenset(value for value in values if type(value) in (bool, int, float, str))
    return kinds


def _classify(strings: list[str], kinds: Kinds, paths: bool) -> None:
    """Counts Python strings into `kinds`; one Arrow cannot hold (a lone surrogate, which JSON
    escapes can make) is a plain string."""
    try:
        array = pa.array(strings, pa.string())
    except (UnicodeEncodeError, pa.ArrowInvalid):
        kept = [string for string in strings if _encodes(string)]
        kinds.strings += len(strings) - len(kept)
        array = pa.array(kept, pa.string())
    classify_strings(array, kinds, paths=paths)


def _encodes(string: str) -> bool:
    try:
        string.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def fields_of_objects(objects: Sequence[dict], origin: First, path: str, level: int, *,
                      labels: Collection[str] = (), paths: Collection[str] = ()) -> dict[str, Kinds]:
    """A summary of each key of `objects` (found at `path`, `level` deep), counting an object
    that lacks it as absent; the keys in `labels` keep their distinct values, those in `paths`
    count their image paths."""
    columns: dict[str, list[Any]] = {}
    firsts: dict[str, First] = {}
    for row, value in enumerate(objects):
        for place, (key, item) in enumerate(value.items()):
            column = columns.get(key)
            if column is None:
                column = columns[key] = []
                firsts[key] = (*origin, row, place)
            column.append(item)
    fields = {}
    for key, column in columns.items():
        missing = len(objects) - len(column)
        kinds = summarize_values(column, labels=key in labels, paths=key in paths, origin=origin,
                                 path=f"{path}.{key}" if path else key, level=level)
        fields[key] = merge(kinds, Kinds(rows=missing, absent=missing)) if missing else kinds
        fields[key].first = firsts[key]
    return fields
