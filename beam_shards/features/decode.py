"""Decoding a whole table on the read side: Arrow columns back to Python, numpy and PIL values.

Used by `ReadFromArrowShards`, which decodes every row of each record batch it reads:
each feature kind decodes its own column (`Feature.decode`) a whole column at a time,
so an Array column becomes one numpy array whose rows are views. `ShardedDataset`
reads a few rows at a time instead, through each feature's row reader
(`Feature.row_reader`), which decodes one row when asked.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from beam_shards.features.schema import Features

_IMAGE_MODES = ("pil", "numpy", "bytes")


def check_image_mode(image_mode: str) -> str:
    if image_mode not in _IMAGE_MODES:
        raise ValueError(f"image_mode must be one of {_IMAGE_MODES}; got {image_mode!r}")
    return image_mode


def decode_table(table: pa.Table | pa.RecordBatch, features: Features, image_mode: str = "pil") -> list[dict[str, Any]]:
    """Decodes every row of `table` (whose columns are a subset of `features`) to a dict.

    Images become PIL images ("pil"), numpy arrays ("numpy", see `image_codec.decode`) or stay bytes
    ("bytes"); Arrays become numpy arrays of their declared shape (read-only views of
    Arrow memory where possible); ClassLabels become ints; Sequences become lists; Json
    values Python values.

    Raises:
      CorruptCacheError: a column holds stored text that is not what its feature wrote; names the column.
    """
    names = table.schema.names
    columns = [features.decode_column(name, _as_array(table.column(name)), image_mode) for name in names]
    return [dict(zip(names, values)) for values in zip(*columns)] if names else [{} for _ in range(table.num_rows)]


def _as_array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column
