"""Decoding on the read side: Arrow columns back to Python, numpy and PIL values.

Used by `ShardedDataset` and, when asked, by `ReadFromArrowShards`. Work is done per
column, not per row: an Array column becomes one numpy array whose rows are views.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_shards import images
from beam_shards.features import Array, Feature, Features, Image, Sequence

IMAGE_MODES = ("pil", "numpy", "bytes")


def check_image_mode(image_mode: str) -> str:
    if image_mode not in IMAGE_MODES:
        raise ValueError(f"image_mode must be one of {IMAGE_MODES}; got {image_mode!r}")
    return image_mode


def decode_table(table: pa.Table | pa.RecordBatch, features: Features, image_mode: str = "pil") -> list[dict[str, Any]]:
    """Decodes every row of `table` (whose columns are a subset of `features`) to a dict.

    Images become PIL images ("pil"), numpy arrays ("numpy", see `images.decode`) or stay bytes
    ("bytes"); Arrays become numpy arrays of their declared shape (read-only views of
    Arrow memory where possible); ClassLabels become ints; Sequences become lists.
    """
    names = table.schema.names
    columns = [decode_column(_as_array(table.column(name)), features[name], image_mode) for name in names]
    return [dict(zip(names, values)) for values in zip(*columns)] if names else [{} for _ in range(table.num_rows)]


def _as_array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def decode_column(array: pa.Array, feature: Feature, image_mode: str = "pil") -> list[Any]:
    """Decodes one Arrow array of `feature` values to a list of Python values."""
    if isinstance(feature, Image):
        if image_mode == "bytes":
            return array.to_pylist()
        return [None if data is None else images.decode(data, image_mode) for data in array.to_pylist()]
    if isinstance(feature, Array):
        return _decode_arrays(array, feature)
    if isinstance(feature, Sequence):
        return _decode_sequences(array, feature, image_mode)
    return array.to_pylist()


def _decode_arrays(array: pa.Array, feature: Array) -> list[Any]:
    if len(array) == 0:
        return []
    if not feature.variable:
        flat = _numpy(array.flatten() if array.null_count == 0 else array.fill_null(_zeros(feature)).flatten())
        rows = list(flat.reshape((len(array),) + feature.shape))
        return _restore_nulls(rows, array)
    inner_shape = feature.shape[1:]
    lengths = _lengths(array)
    values = array.flatten()
    if inner_shape:
        values = values.flatten()
    flat = _numpy(values).reshape((-1,) + inner_shape)
    rows = np.split(flat, np.cumsum(lengths)[:-1])
    return _restore_nulls(rows, array)


def _decode_sequences(array: pa.Array, feature: Sequence, image_mode: str) -> list[Any]:
    lengths = _lengths(array)
    items = decode_column(array.flatten(), feature.feature, image_mode)
    bounds = np.cumsum(lengths)
    rows = [items[end - n:end] for n, end in zip(lengths.tolist(), bounds.tolist())]
    return _restore_nulls(rows, array)


def _lengths(array: pa.Array) -> np.ndarray:
    return pc.list_value_length(array).fill_null(0).to_numpy().astype(np.int64)


def _numpy(values: pa.Array) -> np.ndarray:
    return values.to_numpy(zero_copy_only=values.null_count == 0 and values.type != pa.bool_())


def _zeros(feature: Array) -> pa.Scalar:
    return pa.scalar(np.zeros(feature.shape, dtype=feature.dtype).reshape(-1), type=feature.arrow_type())


def _restore_nulls(rows: list[Any], array: pa.Array) -> list[Any]:
    if array.null_count == 0:
        return rows
    valid = array.is_valid().to_pylist()
    return [row if ok else None for row, ok in zip(rows, valid)]
