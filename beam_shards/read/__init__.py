"""Reading a published cache: Arrow random access, the decoded training view, mixtures of caches, and the sampler."""

from beam_shards.read.backend import ArrowBackend
from beam_shards.read.dataset import ShardedDataset
from beam_shards.read.mixture import Mixture
from beam_shards.read.sampler import ShardedSampler

__all__ = [
    "ArrowBackend", "Mixture", "ShardedDataset", "ShardedSampler",
]
