"""beam_shards: turn a dataset into a sharded Arrow training cache with Apache Beam.

Write with `WriteToArrowShards` (a Beam sink) or `write_shards` (plain Python), read
back with `ReadFromArrowShards` (a Beam source), `ArrowBackend` (Arrow random access)
or `ShardedDataset` (decoded examples for training, in the order `ShardedSampler` gives).
"""

from beam_shards._version import __version__
from beam_shards.backend import ArrowBackend
from beam_shards.dataset import ShardedDataset
from beam_shards.errors import (BeamShardsError, CacheError, CacheExistsError, CacheNotFoundError, CorruptCacheError,
                                EncodeError, FeatureError, PublishError, SchemaMismatchError, StoreAccessError,
                                VersionNotFoundError, WriteInProgressError)
from beam_shards.features import Array, ClassLabel, Feature, Features, Image, Sequence, Value, Video, encode_example
from beam_shards.gc import Retention
from beam_shards.local import write_shards
from beam_shards.manifest import Manifest, ShardInfo
from beam_shards.sampler import ShardedSampler
from beam_shards.verify import VerifyReport, verify
from beam_shards.versions import list_versions, read_metadata
from beam_shards.writer import ShardWriter, WriterOptions

_BEAM_TRANSFORMS = {
    "WriteToArrowShards": "beam_shards.sink",
    "ReadFromArrowShards": "beam_shards.source",
    "ReadAllFromArrowShards": "beam_shards.source",
}


def __getattr__(name: str):
    # The Beam transforms import apache_beam, which training code reading a cache never needs.
    if name in _BEAM_TRANSFORMS:
        import importlib

        return getattr(importlib.import_module(_BEAM_TRANSFORMS[name]), name)
    raise AttributeError(f"module 'beam_shards' has no attribute {name!r}")


__all__ = [
    "Array", "ArrowBackend", "BeamShardsError", "CacheError", "CacheExistsError", "CacheNotFoundError", "ClassLabel",
    "CorruptCacheError", "EncodeError", "Feature", "FeatureError", "Features", "Image", "Manifest", "PublishError",
    "ReadAllFromArrowShards", "ReadFromArrowShards", "Retention", "SchemaMismatchError", "Sequence", "ShardInfo",
    "ShardWriter", "ShardedDataset", "ShardedSampler", "StoreAccessError", "Value", "VerifyReport",
    "VersionNotFoundError", "Video", "WriteInProgressError",
    "WriteToArrowShards", "WriterOptions", "__version__", "encode_example", "list_versions", "read_metadata",
    "verify", "write_shards",
]
