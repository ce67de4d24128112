"""Hugging Face datasets in and out: `from_hf` writes a `datasets.Dataset` (or each split of a
`DatasetDict`) as a cache, `to_hf_features` / `from_hf_features` map features both ways
(the table is in `beam_shards.features.hf`), and `ShardedDataset.to_hf()` reads a cache
back as a `datasets.Dataset`. Hugging Face datasets is imported only when these run
(`pip install 'beam_shards[hf]'`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from beam_shards.features import Features
from beam_shards.features.hf import from_hf_dict, storage_schema, to_hf_dict
from beam_shards.format.manifest import Manifest
from beam_shards.storage import fs
from beam_shards.write import write_shards

_BATCH_ROWS = 1000


def to_hf_features(features: Features) -> Any:
    """The Hugging Face `datasets.Features` equal to `features`.

    Example:
        >>> from beam_shards import Features, Sequence, Struct, Value
        >>> to_hf_features(Features({"m": Sequence(Struct({"role": Value("string")}))}))
        {'m': List({'role': Value('string')})}

    Raises:
      FeatureError: a feature with no equal in Hugging Face datasets, naming it.
    """
    import datasets

    return datasets.Features.from_dict(to_hf_dict(features))


def from_hf_features(features: Any) -> Features:
    """Our `Features` equal to Hugging Face `datasets.Features` (or their `to_dict()` form).

    Raises:
      FeatureError: a Hugging Face feature with no equal here, naming its column.
    """
    return from_hf_dict(features if isinstance(features, Mapping) and not hasattr(features, "to_dict")
                        else features.to_dict())


def from_hf(dataset: Any, path: str, **write_options: Any) -> Manifest | dict[str, Manifest]:
    """Writes a Hugging Face `datasets.Dataset` as a cache at `path`, with features equal to its own.

    A `DatasetDict` is written split by split, each to `path/<split>`. Rows are read from
    the dataset's Arrow table in record batches and checked column by column (images
    and audio stored by path are read from their files), so a dataset of any size
    passes through in bounded memory.

    Example:
        >>> import datasets  # doctest: +SKIP
        >>> ds = datasets.Dataset.from_dict({"text": ["a", "b"], "label": [0, 1]})  # doctest: +SKIP
        >>> from_hf(ds, "/tmp/hf_cache").num_rows  # doctest: +SKIP
        2

    Args:
      dataset: a `datasets.Dataset` or `datasets.DatasetDict`.
      path: the cache folder (local, gs://, s3://...); for a DatasetDict, the folder of
        one cache per split.
      **write_options: as `write_shards` takes them (shard_size_bytes, mode, metadata...).

    Returns:
      The published manifest, or a dict of them by split.

    Raises:
      FeatureError: a feature with no equal here. TypeError: not a Dataset or DatasetDict.
    """
    import datasets

    if isinstance(dataset, datasets.DatasetDict):
        return {split: from_hf(part, fs.join(path, split), **write_options) for split, part in dataset.items()}
    if not isinstance(dataset, datasets.Dataset):
        raise TypeError(f"from_hf takes a datasets.Dataset or DatasetDict; got {type(dataset).__name__}")
    features = from_hf_features(dataset.features)
    metadata = {"source": "huggingface", **({"hf_info": dataset.info.description} if dataset.info.description else {}),
                **(write_options.pop("metadata", None) or {})}
    return write_shards(_batches(dataset), path, features, metadata=metadata, **write_options)


def _batches(dataset: Any) -> Iterator[pa.Table]:
    """The dataset's rows as Arrow tables, Hugging Face's extension arrays as their storage."""
    for table in dataset.with_format("arrow").iter(batch_size=_BATCH_ROWS):
        yield table.cast(storage_schema(table.schema))
