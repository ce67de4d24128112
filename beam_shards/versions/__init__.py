"""Changing a cache's versions: committing a new one, the lock, retention, verification, compaction,
deduplication, skipped inputs."""

from beam_shards.lazy import lazy_names

_LAZY = {
    "bad_inputs_path": "beam_shards.versions.bad_inputs",
    "read_bad_inputs": "beam_shards.versions.bad_inputs",
    "write_bad_inputs": "beam_shards.versions.bad_inputs",
    "abandon": "beam_shards.versions.commit",
    "check_features": "beam_shards.versions.commit",
    "check_write": "beam_shards.versions.commit",
    "find_published": "beam_shards.versions.commit",
    "publish": "beam_shards.versions.commit",
    "compact": "beam_shards.versions.compaction",
    "deduplicate": "beam_shards.versions.dedup",
    "DEFAULT_KEEP": "beam_shards.versions.gc",
    "DEFAULT_MIN_AGE": "beam_shards.versions.gc",
    "Retention": "beam_shards.versions.gc",
    "collect_garbage": "beam_shards.versions.gc",
    "find_garbage": "beam_shards.versions.gc",
    "remove_staging": "beam_shards.versions.staging",
    "staged_order": "beam_shards.versions.staging",
    "staged_shards": "beam_shards.versions.staging",
    "VerifyReport": "beam_shards.versions.verification",
    "verify": "beam_shards.versions.verification",
}

__getattr__ = lazy_names(__name__, _LAZY)

__all__ = [
    "abandon", "bad_inputs_path", "check_features", "check_write", "collect_garbage", "compact", "DEFAULT_KEEP",
    "DEFAULT_MIN_AGE", "deduplicate", "find_garbage", "find_published", "publish", "read_bad_inputs", "remove_staging", "Retention",
    "staged_order", "staged_shards", "verify", "VerifyReport", "write_bad_inputs",
]
