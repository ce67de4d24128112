"""Changing a cache's versions: committing a new one, the lock, retention, verification, compaction, skipped inputs."""
