"""beam_shards: turn a dataset into a sharded Arrow training cache with Apache Beam.

Write with `WriteToArrowShards` (a Beam sink) or `write_shards` (plain Python), read
back with `ReadFromArrowShards` (a Beam source), `ArrowBackend` (Arrow random access)
or `ShardedDataset` (decoded examples for training, in the order `ShardedSampler` gives;
`Mixture` mixes several caches by weight).
"""

from beam_shards._version import __version__
from beam_shards.errors import (BeamShardsError, CacheError, CacheExistsError, CacheNotFoundError, CorruptCacheError,
                                EmptyWriteError, EncodeError, FeatureError, PublishError, SchemaMismatchError,
                                StoreAccessError, TooManyBadError, VersionNotFoundError, WriteInProgressError)
from beam_shards.features import (Array, Audio, ClassLabel, Feature, Features, Image, Json, Sequence, Struct, Value,
                                  Video, encode_example)
from beam_shards.format.catalog import list_versions, read_metadata, shard_paths
from beam_shards.format.layout import new_write_id
from beam_shards.format.manifest import Manifest
from beam_shards.format.shard_table import ShardInfo
from beam_shards.hf import from_hf, from_hf_features, to_hf_features
from beam_shards.lazy import lazy_names
from beam_shards.read.backend import ArrowBackend
from beam_shards.read.dataset import ShardedDataset
from beam_shards.read.mixture import Mixture
from beam_shards.read.sampler import ShardedSampler
from beam_shards.shards.options import WriterOptions
from beam_shards.shards.writer import ShardWriter
from beam_shards.units import parse_count, parse_duration, parse_size
from beam_shards.versions.commit import abandon
from beam_shards.versions.gc import Retention, collect_garbage
from beam_shards.versions.verify import VerifyReport, verify
from beam_shards.write import write_shards

_LAZY = {
    "WriteToArrowShards": "beam_shards.beam.sink",
    "ReadFromArrowShards": "beam_shards.beam.source",
    "ReadAllFromArrowShards": "beam_shards.beam.source",
    "ShardedDataLoader": "beam_shards.read.loader",
}

# The Beam transforms import apache_beam, which training code never needs; the loader imports torch.
__getattr__ = lazy_names(__name__, _LAZY)

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
