"""Where bytes live: file access for local paths and object stores (`fs`), what folders hold
(`folders`), store-specific calls, the disk cache and checksums."""

from beam_shards.lazy import lazy_names

_LAZY = {
    "CHECKSUM_PATTERN": "beam_shards.storage.checksum",
    "Crc32": "beam_shards.storage.checksum",
    "checksum_of": "beam_shards.storage.checksum",
    "crc32": "beam_shards.storage.checksum",
    "DiskCache": "beam_shards.storage.disk_cache",
    "FileStat": "beam_shards.storage.folders",
    "delete_tree": "beam_shards.storage.folders",
    "list_dir": "beam_shards.storage.folders",
    "list_files": "beam_shards.storage.folders",
    "remove_empty_dir": "beam_shards.storage.folders",
    "sizes": "beam_shards.storage.folders",
    "walk": "beam_shards.storage.folders",
    "check_cache_path": "beam_shards.storage.fs",
    "create": "beam_shards.storage.fs",
    "create_if_absent": "beam_shards.storage.fs",
    "delete": "beam_shards.storage.fs",
    "exists": "beam_shards.storage.fs",
    "is_local": "beam_shards.storage.fs",
    "is_memory_mapped": "beam_shards.storage.fs",
    "map_file": "beam_shards.storage.fs",
    "mapped_size": "beam_shards.storage.fs",
    "join": "beam_shards.storage.fs",
    "local_path": "beam_shards.storage.fs",
    "open_random_access": "beam_shards.storage.fs",
    "open_read": "beam_shards.storage.fs",
    "read_bytes": "beam_shards.storage.fs",
    "rename": "beam_shards.storage.fs",
    "sync_dir": "beam_shards.storage.fs",
    "write_bytes_atomic": "beam_shards.storage.fs",
    "create_new": "beam_shards.storage.local_files",
    "access_error": "beam_shards.storage.store_errors",
    "kind": "beam_shards.storage.store_errors",
}

__getattr__ = lazy_names(__name__, _LAZY)

__all__ = [
    "access_error", "check_cache_path", "checksum_of", "CHECKSUM_PATTERN", "Crc32", "crc32", "create", "create_if_absent",
    "create_new", "delete", "delete_tree", "DiskCache", "exists", "FileStat", "is_local", "is_memory_mapped", "join", "map_file",
    "mapped_size", "kind", "list_dir", "list_files", "local_path", "open_random_access", "open_read", "read_bytes", "remove_empty_dir",
    "rename", "sizes", "sync_dir", "walk", "write_bytes_atomic",
]
