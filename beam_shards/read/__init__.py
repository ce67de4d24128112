"""Reading a published cache: Arrow random access, the decoded training view, and the sampler."""

from beam_shards.read.backend import ArrowBackend
from beam_shards.read.dataset import ShardedDataset
from beam_shards.read.sampler import ShardedSampler

__all__ = [
    "ArrowBackend", "ShardedDataset", "ShardedSampler",
]
