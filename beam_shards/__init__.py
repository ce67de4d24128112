"""beam_shards: turn a dataset into a sharded Arrow training cache with Apache Beam.

Write with `WriteToArrowShards` (a Beam sink) or `write_shards` (plain Python), read
back with `ReadFromArrowShards` (a Beam source), `ArrowBackend` (Arrow random access)
or `ShardedDataset` (decoded examples for training, in the order `ShardedSampler` gives;
`Mixture` mixes several caches by weight).
"""

import importlib
from typing import Any

_LAZY = {
    "__version__": "beam_shards._version",
    "BeamShardsError": "beam_shards.errors",
    "CacheError": "beam_shards.errors",
    "CacheExistsError": "beam_shards.errors",
    "CacheNotFoundError": "beam_shards.errors",
    "CorruptCacheError": "beam_shards.errors",
    "EmptyWriteError": "beam_shards.errors",
    "EncodeError": "beam_shards.errors",
    "FeatureError": "beam_shards.errors",
    "PublishError": "beam_shards.errors",
    "SchemaMismatchError": "beam_shards.errors",
    "StoreAccessError": "beam_shards.errors",
    "TooManyBadError": "beam_shards.errors",
    "VersionNotFoundError": "beam_shards.errors",
    "WriteInProgressError": "beam_shards.errors",
    "Array": "beam_shards.features.array",
    "Audio": "beam_shards.features.files",
    "ClassLabel": "beam_shards.features.value",
    "Feature": "beam_shards.features.base",
    "Features": "beam_shards.features.schema",
    "Image": "beam_shards.features.files",
    "Json": "beam_shards.features.json_value",
    "Sequence": "beam_shards.features.sequence",
    "Struct": "beam_shards.features.struct",
    "Value": "beam_shards.features.value",
    "Video": "beam_shards.features.files",
    "encode_example": "beam_shards.features.schema",
    "list_versions": "beam_shards.format.catalog",
    "read_metadata": "beam_shards.format.catalog",
    "shard_paths": "beam_shards.format.catalog",
    "new_write_id": "beam_shards.format.layout",
    "Manifest": "beam_shards.format.manifest",
    "ShardInfo": "beam_shards.format.table_files",
    "from_hf": "beam_shards.hf.from_datasets",
    "from_hf_features": "beam_shards.hf.features",
    "to_hf_features": "beam_shards.hf.features",
    "ArrowBackend": "beam_shards.read.backend",
    "ShardedDataset": "beam_shards.read.dataset",
    "Mixture": "beam_shards.read.mixture",
    "ShardedSampler": "beam_shards.read.sampler",
    "WriterOptions": "beam_shards.shards.options",
    "ShardWriter": "beam_shards.shards.writer",
    "parse_count": "beam_shards.units",
    "parse_duration": "beam_shards.units",
    "parse_size": "beam_shards.units",
    "abandon": "beam_shards.versions.commit",
    "Retention": "beam_shards.versions.gc",
    "collect_garbage": "beam_shards.versions.gc",
    "VerifyReport": "beam_shards.versions.verification",
    "verify": "beam_shards.versions.verification",
    "write_shards": "beam_shards.write",
    "WriteToArrowShards": "beam_shards.beam.sink",
    "ReadFromArrowShards": "beam_shards.beam.source",
    "ReadAllFromArrowShards": "beam_shards.beam.source",
    "ShardedDataLoader": "beam_shards.read.loader",
}



def __getattr__(name: str) -> Any:
    """Imports each name on first use, as `beam_shards.lazy` does for the other faces.

    Training code never imports apache_beam (the transforms) or torch (the loader). This face
    imports nothing of the package at all, `beam_shards.lazy` included: a thread that imports
    one of the package's modules first takes that module's lock and then runs this file, so
    anything imported from here could deadlock two threads (see `beam_shards.lazy`).
    """
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value

__all__ = [
    "__version__", "abandon", "Array", "ArrowBackend", "Audio", "BeamShardsError", "CacheError", "CacheExistsError",
    "CacheNotFoundError", "ClassLabel", "collect_garbage", "CorruptCacheError", "EmptyWriteError", "encode_example",
    "EncodeError", "Feature", "FeatureError", "Features", "from_hf", "from_hf_features", "Image", "Json", "list_versions",
    "Manifest", "Mixture", "new_write_id", "parse_count", "parse_duration", "parse_size", "PublishError", "read_metadata",
    "ReadAllFromArrowShards", "ReadFromArrowShards", "Retention", "SchemaMismatchError", "Sequence", "shard_paths",
    "ShardedDataLoader", "ShardedDataset", "ShardedSampler", "ShardInfo", "ShardWriter", "StoreAccessError", "Struct",
    "to_hf_features", "TooManyBadError", "Value", "verify", "VerifyReport", "VersionNotFoundError", "Video",
    "write_shards", "WriteInProgressError", "WriterOptions", "WriteToArrowShards",
]
