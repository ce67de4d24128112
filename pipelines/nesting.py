"""How deeply an input nests, checked before anything recurses into it.

JSON text (a JSONL line, a CSV cell) is measured by its brackets outside strings before
it is parsed, and a Parquet column by its Arrow type, level by level: the measures
themselves never recurse, so any depth is measured safely. Past `MAX_DEPTH` levels an
input is refused, as the manifest refuses features and metadata nested deeper.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from beam_shards import FeatureError
from beam_shards.format import MAX_DEPTH, json_text_depth

class TooDeep(ValueError):
    """JSON text nests lists and objects deeper than `MAX_DEPTH` levels."""


def check_json_text(text: str) -> None:
    """Raises TooDeep when JSON text nests lists and objects deeper than `MAX_DEPTH` levels."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = json_text_depth(text.encode("utf-8", "surrogatepass"))
    if depth > MAX_DEPTH:
        raise TooDeep(f"nests lists and objects {depth} levels deep, deeper than the {MAX_DEPTH} an input may")


def loads(text: str) -> Any:
    """`json.loads(text)` once `check_json_text` passes. Text rather than bytes, which the
    parser may read as UTF-16 or UTF-32, where the brackets are not the bytes counted.

    Raises:
      TooDeep: nested deeper than `MAX_DEPTH` levels. ValueError: not JSON.
    """
    check_json_text(text)
    return json.loads(text)


def arrow_type_depth(arrow_type: pa.DataType) -> int:
    """How many levels of lists, structs and maps an Arrow type nests: 0 for a number."""
    depth, level = 0, [arrow_type]
    while True:
        level = [kind.value_type if pa.types.is_dictionary(kind) else kind for kind in level]
        nested = [kind for kind in level if pa.types.is_nested(kind)]
        if not nested:
            return depth
        depth += 1
        level = [kind.field(i).type for kind in nested for i in range(kind.num_fields)]


def check_arrow_type(column: str, arrow_type: pa.DataType) -> None:
    """Raises FeatureError when a column's Arrow type nests deeper than `MAX_DEPTH` levels."""
    depth = arrow_type_depth(arrow_type)
    if depth > MAX_DEPTH:
        raise FeatureError(f"column {column!r} nests lists and structs {depth} levels deep, deeper than the "
                           f"{MAX_DEPTH} an input may")
