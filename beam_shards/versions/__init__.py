"""Changing a cache's versions: committing a new one, the lock, retention, verification, compaction,
deduplication, skipped inputs."""

from beam_shards.versions.bad_inputs import bad_inputs_path, read_bad_inputs, write_bad_inputs
from beam_shards.versions.commit import abandon, check_features, check_write, find_published, publish
from beam_shards.versions.compact import compact
from beam_shards.versions.dedup import deduplicate
from beam_shards.versions.gc import DEFAULT_KEEP, DEFAULT_MIN_AGE, Retention, collect_garbage, find_garbage
from beam_shards.versions.staging import remove_staging, staged_order, staged_shards
from beam_shards.versions.verify import VerifyReport, verify

__all__ = [
    "abandon", "bad_inputs_path", "check_features", "check_write", "collect_garbage", "compact", "DEFAULT_KEEP",
    "DEFAULT_MIN_AGE", "deduplicate", "find_garbage", "find_published", "publish", "read_bad_inputs", "remove_staging", "Retention",
    "staged_order", "staged_shards", "verify", "VerifyReport", "write_bad_inputs",
]
