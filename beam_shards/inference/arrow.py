"""Summaries of typed Arrow arrays, as pyarrow's JSON reader gives them: nulls, bools, ints,
floats, strings, timestamps and dates, lists and structs, a level at a time.

In Arrow a key a row lacks and a null are the same: both count as nulls.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.errors import FeatureError
from beam_shards.inference.kinds import First, Kinds, note_int_range
from beam_shards.inference.strings import classify_strings
from beam_shards.inference.values import check_level


def summarize_arrow(array: pa.Array | pa.ChunkedArray, *, labels: bool = False, paths: bool = False,
                    origin: First = (), path: str = "value", level: int = 0) -> Kinds:
    """The summary of an Arrow array (of a column named `path`, `level` lists or structs deep).

    Example:
        >>> kinds = summarize_arrow(pa.array([[1, 2], None, []]))
        >>> kinds.lists, kinds.nulls, kinds.items.ints
        (2, 1, 2)

    Args:
      labels: keep the distinct values (of a label column).
      paths: count the strings that end in an image file extension.
      origin: where the values are in the input (see `kinds.First`).

    Raises:
      FeatureError: an Arrow type inference does not read (naming it), or lists and structs
        nested deeper than `MAX_DEPTH` levels.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = array.type
    if pa.types.is_dictionary(kind):
        array, kind = array.dictionary_decode(), kind.value_type
    kinds = Kinds(rows=len(array), nulls=len(array) if pa.types.is_null(kind) else array.null_count)
    present = array.drop_null() if kinds.nulls and not pa.types.is_null(kind) else array
    if pa.types.is_null(kind) or len(present) == 0:
        pass
    elif pa.types.is_boolean(kind):
        kinds.bools = len(present)
    elif pa.types.is_integer(kind):
        kinds.ints = len(present)
        low, high = pc.min_max(present).values()
        note_int_range(kinds, low.as_py(), high.as_py())
    elif pa.types.is_floating(kind):
        kinds.floats = len(present)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        classify_strings(present, kinds, paths=paths)
    elif pa.types.is_timestamp(kind):
        kinds.zoned, kinds.datetimes = (len(present), 0) if kind.tz else (0, len(present))
    elif pa.types.is_date(kind):
        kinds.dates = len(present)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        check_level(path, level + 1)
        kinds.lists = len(present)
        items = present.flatten()
        if len(items):
            kinds.items = summarize_arrow(items, origin=origin, path=f"{path}[]", level=level + 1)
    elif pa.types.is_struct(kind):
        check_level(path, level + 1)
        kinds.objects = len(present)
        for place, child in enumerate(present.flatten()):
            name = kind.field(place).name
            kinds.fields[name] = summarize_arrow(child, origin=origin, path=f"{path}.{name}", level=level + 1)
            kinds.fields[name].first = (*origin, 0, place)
    else:
        raise FeatureError(f"{path!r} holds Arrow type {kind}, which inference does not read")
    if labels:
        scalar = not pa.types.is_nested(kind) and not pa.types.is_null(kind)
        kinds.labels = frozenset(pc.unique(present).to_pylist()) if scalar else frozenset()
    return kinds
