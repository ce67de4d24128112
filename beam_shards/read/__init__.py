"""Reading a published cache: Arrow random access, the decoded training view, mixtures of caches, and the sampler."""

from beam_shards.lazy import lazy_names

_LAZY = {
    "ArrowBackend": "beam_shards.read.backend",
    "ShardedDataset": "beam_shards.read.dataset",
    "Mixture": "beam_shards.read.mixture",
    "ShardedSampler": "beam_shards.read.sampler",
}

__getattr__ = lazy_names(__name__, _LAZY)

__all__ = [
    "ArrowBackend", "Mixture", "ShardedDataset", "ShardedSampler",
]
