"""Hugging Face datasets in and out, in one place.

- `features`: the features mapping both ways (`to_hf_features`, `from_hf_features`,
  `from_hf_dict`), walking the Hugging Face form each kind describes of itself.
- `from_datasets`: `from_hf`, a `datasets.Dataset` (or `DatasetDict`) written as a cache.
- `to_datasets`: a cache's rows as a `datasets.Dataset` (`ShardedDataset.to_hf()`).
- `metadata`: Hugging Face features read back from files others wrote (a schema's
  `huggingface` metadata, a `save_to_disk` folder), none of it trusted.

Hugging Face datasets is imported only when these run (`pip install 'beam_shards[hf]'`).
This part sits above `write` (`from_hf` writes through it) and below `read` (whose
`ShardedDataset.to_hf()` hands its rows to `hf_dataset`); shards carry the Hugging Face
features in their schema's metadata, which `Features.arrow_schema()` writes from the kinds'
own forms, so nothing below needs this part.
"""

from beam_shards.lazy import lazy_names

_LAZY = {
    "from_hf_dict": "beam_shards.hf.features",
    "from_hf_features": "beam_shards.hf.features",
    "to_hf_features": "beam_shards.hf.features",
    "from_hf": "beam_shards.hf.from_datasets",
    "hf_storage_schema": "beam_shards.hf.from_datasets",
    "hf_features_of": "beam_shards.hf.metadata",
    "load_json": "beam_shards.hf.metadata",
    "saved_dataset": "beam_shards.hf.metadata",
    "hf_dataset": "beam_shards.hf.to_datasets",
}

__getattr__ = lazy_names(__name__, _LAZY)

__all__ = [
    "from_hf", "from_hf_dict", "from_hf_features", "hf_dataset", "hf_features_of", "hf_storage_schema", "load_json",
    "saved_dataset", "to_hf_features",
]
