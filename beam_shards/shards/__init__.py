"""Shard files: writing encoded rows into size-rotated Arrow IPC shards, reading one back, merging small ones."""
