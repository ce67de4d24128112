"""Where bytes live: file access for local paths and object stores (`fs`), what folders hold
(`folders`), store-specific calls, the disk cache and checksums."""

from beam_shards.storage.checksum import CHECKSUM_PATTERN, Crc32, checksum_of
from beam_shards.storage.disk_cache import DiskCache
from beam_shards.storage.folders import FileStat, delete_tree, list_dir, list_files, remove_empty_dir, sizes, walk
from beam_shards.storage.fs import (check_cache_path, create, create_if_absent, delete, exists, is_local,
                                    is_memory_mapped, join, local_path, open_random_access, open_read, read_bytes,
                                    rename, sync_dir, write_bytes_atomic)
from beam_shards.storage.local_files import create_new
from beam_shards.storage.store_errors import access_error, kind

__all__ = [
    "access_error", "check_cache_path", "checksum_of", "CHECKSUM_PATTERN", "Crc32", "create", "create_if_absent",
    "create_new", "delete", "delete_tree", "DiskCache", "exists", "FileStat", "is_local", "is_memory_mapped", "join",
    "kind", "list_dir", "list_files", "local_path", "open_random_access", "open_read", "read_bytes", "remove_empty_dir",
    "rename", "sizes", "sync_dir", "walk", "write_bytes_atomic",
]
