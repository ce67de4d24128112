"""A cache's rows as a Hugging Face `datasets.Dataset` (what `ShardedDataset.to_hf()` returns)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.features import Array, Features
from beam_shards.features.base import list_lengths
from beam_shards.features.columns import numpy_values
from beam_shards.hf.features import to_hf_features


def hf_dataset(features: Features, read: Callable[[], pa.Table]) -> Any:
    """The table `read()` gives (columns of `features`, as a cache stores them) as a
    `datasets.Dataset` of the equal Hugging Face features. Columns Hugging Face stores alike
    are not copied; the others (binary, Image, Audio, Video and ArrayND columns, and strings
    and lists in caches older than format 4) are cast to Hugging Face's storage types.

    Raises:
      ImportError: Hugging Face datasets is not installed (pip install 'beam_shards[hf]').
      FeatureError: a feature with no equal in Hugging Face datasets (before anything is read).
    """
    import datasets
    from datasets.table import InMemoryTable, table_cast

    hf = to_hf_features(features)
    table = read().replace_schema_metadata(None)
    for index, name in enumerate(table.column_names):
        feature, target = features[name], hf.arrow_schema.field(name).type
        if isinstance(feature, Array) and isinstance(target, pa.ExtensionType):
            column = table.column(index).combine_chunks()
            table = table.set_column(index, name, pa.ExtensionArray.from_storage(
                target, _array_storage(column, feature).cast(target.storage_type)))
    return datasets.Dataset(InMemoryTable(table_cast(table, hf.arrow_schema)), info=datasets.DatasetInfo(features=hf))


def _array_storage(array: pa.Array, feature: Array) -> pa.Array:
    """A column of `feature` (as stored here: a flat fixed-size list, or a list of them when the
    first dimension varies) as Hugging Face stores an ArrayND: lists nested to its shape."""
    values, lengths = array, None
    if feature.variable:
        lengths = list_lengths(array)
        values = array.flatten()
    values = values.flatten()
    for size in reversed(feature.shape[1:]):
        values = pa.ListArray.from_arrays(pa.array(np.arange(len(values) // size + 1, dtype=np.int32) * size), values)
    if lengths is None:  # a null row holds no values (flatten leaves its slots out)
        lengths = np.where(numpy_values(array.is_null()), 0, feature.shape[0]) if array.null_count else np.full(
            len(array), feature.shape[0], dtype=np.int64)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, values, mask=array.is_null() if array.null_count else None)
