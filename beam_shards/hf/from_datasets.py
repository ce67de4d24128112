"""A Hugging Face `datasets.Dataset` (or each split of a `DatasetDict`) written as a cache."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from beam_shards.features import Features
from beam_shards.format.manifest import Manifest
from beam_shards.hf.features import from_hf_features
from beam_shards.storage import fs
from beam_shards.write import write_shards

_BATCH_ROWS = 1000
# The kinds that keep each file's path (`keep_path`), by the `_type` of their JSON form.
_FILE_KINDS = ("Image", "Video", "Audio")


def from_hf(dataset: Any, path: str, **write_options: Any) -> Manifest | dict[str, Manifest]:
    """Writes a Hugging Face `datasets.Dataset` as a cache at `path`, with features equal to its own.

    A `DatasetDict` is written split by split, each to `path/<split>`. Rows are read from
    the dataset's Arrow table in record batches and checked column by column (images
    and audio stored by path are read from their files), so a dataset of any size
    passes through in bounded memory. Images, videos and audio keep each file's path
    beside its bytes (`keep_path=True`), so that `to_hf()` gives them back as they came.

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
    features = keeping_paths(from_hf_features(dataset.features))
    metadata = {"source": "huggingface", **({"hf_info": dataset.info.description} if dataset.info.description else {}),
                **(write_options.pop("metadata", None) or {})}
    return write_shards(_batches(dataset), path, features, metadata=metadata, **write_options)


def keeping_paths(features: Features) -> Features:
    """`features` with every Image, Video and Audio in them (at any depth) made `keep_path=True`."""
    def kept(spec: Any) -> Any:
        if isinstance(spec, list):
            return [kept(item) for item in spec]
        if not isinstance(spec, dict):
            return spec
        spec = {key: kept(value) for key, value in spec.items()}
        return {**spec, "keep_path": True} if spec.get("_type") in _FILE_KINDS else spec
    return Features.from_dict(kept(features.to_dict()))


def _batches(dataset: Any) -> Iterator[pa.Table]:
    """The dataset's rows as Arrow tables, Hugging Face's extension arrays as their storage."""
    for table in dataset.with_format("arrow").iter(batch_size=_BATCH_ROWS):
        yield table.cast(hf_storage_schema(table.schema))


def hf_storage_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with every extension type in it (Hugging Face's ArrayND) replaced by its storage
    type, which the features here check and cast."""
    return pa.schema([field.with_type(_storage_type(field.type)) for field in schema], metadata=schema.metadata)


def _storage_type(arrow_type: pa.DataType) -> pa.DataType:
    if isinstance(arrow_type, pa.ExtensionType):
        return _storage_type(arrow_type.storage_type)
    if pa.types.is_struct(arrow_type):
        return pa.struct([arrow_type.field(i).with_type(_storage_type(arrow_type.field(i).type))
                          for i in range(arrow_type.num_fields)])
    if pa.types.is_fixed_size_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(_storage_type(arrow_type.value_type)), arrow_type.list_size)
    if pa.types.is_large_list(arrow_type):
        return pa.large_list(arrow_type.value_field.with_type(_storage_type(arrow_type.value_type)))
    if pa.types.is_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(_storage_type(arrow_type.value_type)))
    return arrow_type
