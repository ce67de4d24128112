"""A local disk cache of whole shard files fetched from an object store, shared by every process on the machine.

Layout of the cache folder:
  `crc32-<8 hex>-<size>.arrow`   a complete file whose checksum and size were checked before it got this name;
  `<that name>.tmp-<pid>-<tid>`  a download in progress (never served);
  `<that name>.lock`             the lock one download of that file holds (empty, kept);
  `.evict.lock`                  the lock an eviction holds.

Shards are immutable and named by their checksum and size, so a file under its final name is never stale. A
download streams into a temporary file, is checked and synced, then renamed into place in one step: a reader sees
the whole file or none. Each name has its own lock, so processes that want the same shard wait for one download
and then reuse it, while different shards download in parallel. Each use sets a file's mtime; after a download the
least recently used files are deleted until the folder holds at most `max_bytes`.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

import filelock

from beam_shards.errors import CorruptCacheError
from beam_shards.storage.checksum import CHECKSUM_PATTERN, Crc32

_CHUNK = 4 << 20
_FILE = re.compile(r"crc32-[0-9a-f]{8}-\d+\.arrow")
_TEMPORARY = re.compile(r"crc32-[0-9a-f]{8}-\d+\.arrow\.tmp-(\d+)-\d+")
_STALE_SECONDS = 3600
"""A temporary not written to for this long is left over, even if a process with its pid runs (pids are reused)."""


class DiskCache:
    """A local folder of whole, verified shard files, keyed by checksum, shared by every process on the machine.

    Every process may hold its own `DiskCache` on the same folder: they coordinate through file locks only, so
    an instance pickles and works after fork. `hits`, `misses` and `bytes_fetched` count this instance's work in
    this process.

    Example:
        >>> cache = DiskCache("/tmp/shard_cache", max_bytes=10 << 30)  # doctest: +SKIP
        >>> path = cache.get(shard.checksum, shard.num_bytes, lambda: FileSystems.open(uri))  # doctest: +SKIP

    Args:
      cache_dir: the folder (created if missing).
      max_bytes: the most bytes of complete files the folder keeps; a larger file is never cached.

    Raises:
      ValueError: `cache_dir` is empty or `max_bytes` is not a positive int.
    """

    def __init__(self, cache_dir: str, max_bytes: int):
        if not isinstance(cache_dir, str) or not cache_dir:
            raise ValueError(f"cache_dir must be a folder path, got {cache_dir!r}")
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
            raise ValueError(f"max_bytes must be a positive number of bytes, got {max_bytes!r}")
        self.cache_dir = os.path.abspath(cache_dir)
        self.max_bytes = max_bytes
        self.hits = self.misses = self.bytes_fetched = 0
        os.makedirs(self.cache_dir, exist_ok=True)

    def __repr__(self) -> str:
        return f"DiskCache({self.cache_dir!r}, max_bytes={self.max_bytes})"

    def get(self, key: str, size: int, fetch: Callable[[], BinaryIO]) -> str | None:
        """The local path of the complete file for `key` of `size` bytes, fetched with `fetch()` if absent.

        Another process may evict the file once it is returned (when newer uses push it out of `max_bytes`): open
        it at once, and call `get` again if it is gone. A file stays readable while it is open or memory-mapped.

        Args:
          key: the file's checksum as its manifest writes it, like `"crc32:0a1b2c3d"`.
          size: its size in bytes.
          fetch: opens a readable binary stream of the remote file; called at most once.

        Returns:
          The path, or None when `size` exceeds `max_bytes` (read the remote file in ranges instead).

        Raises:
          ValueError: `key` is not a checksum or `size` not a count of bytes.
          CorruptCacheError: the fetched bytes do not have `size` or checksum `key`; nothing was kept.
          Whatever `fetch()` or reading its stream raises; nothing was kept.
        """
        path = os.path.join(self.cache_dir, _file_name(key, size))
        if size > self.max_bytes:
            return None
        if _use(path, size):
            self.hits += 1
            return path
        with filelock.FileLock(path + ".lock"):
            if _use(path, size):  # Another process downloaded it while this one waited.
                self.hits += 1
                return path
            self._download(key, size, fetch, path)
        self.misses += 1
        self._evict(keep=path)
        return path

    def _download(self, key: str, size: int, fetch: Callable[[], BinaryIO], path: str) -> None:
        """Streams `fetch()` into a temporary, checks it, and renames it to `path`; leaves nothing else behind."""
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)  # Of the wrong size: absent.
        temporary = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        crc = Crc32()
        try:
            with open(temporary, "wb") as out, fetch() as stream:
                # Reads at most one chunk past `size`, so a wrong stream cannot fill the disk.
                while crc.size <= size and (chunk := stream.read(_CHUNK)):
                    crc.update(chunk)
                    self.bytes_fetched += len(chunk)
                    out.write(chunk)
                if (crc.checksum(), crc.size) != (key, size):
                    found = f"{crc.size} bytes" if crc.size <= size else f"more than {size} bytes"
                    raise CorruptCacheError(f"the download of {key} into {self.cache_dir} has {found} with checksum "
                                            f"{crc.checksum()}; expected {size} bytes with checksum {key}")
                out.flush()
                os.fsync(out.fileno())
            # The data is synced before the rename, so even after a power cut the name holds the whole file (or,
            # if the rename itself was lost, nothing: a cache may forget).
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.remove(temporary)
            raise

    def _evict(self, keep: str) -> None:
        """Deletes least recently used files until at most `max_bytes` remain, never `keep`; and left-over
        temporaries. Deleting a file another process has open or memory-mapped is safe on POSIX: its data lives
        until the last handle closes."""
        with filelock.FileLock(os.path.join(self.cache_dir, ".evict.lock")):
            files = []
            with os.scandir(self.cache_dir) as entries:
                for entry in entries:
                    with contextlib.suppress(FileNotFoundError):
                        if _FILE.fullmatch(entry.name):
                            stat = entry.stat()
                            files.append((stat.st_mtime_ns, stat.st_size, entry.path))
                        elif (match := _TEMPORARY.fullmatch(entry.name)) and _left_over(entry, int(match[1])):
                            os.remove(entry.path)
            total = sum(size for _, size, _ in files)
            for _, size, path in sorted(files):
                if total <= self.max_bytes:
                    break
                if path != keep:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(path)
                    total -= size


def _file_name(key: str, size: int) -> str:
    """The file name of `key` and `size`, both checked: a manifest is untrusted and must not name a path."""
    if not isinstance(key, str) or not CHECKSUM_PATTERN.fullmatch(key):
        raise ValueError(f"a cached file's key must be a checksum like 'crc32:0a1b2c3d', got {key!r}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError(f"the size of {key} must be a count of bytes, got {size!r}")
    return f"crc32-{key[len('crc32:'):]}-{size}.arrow"


def _use(path: str, size: int) -> bool:
    """Marks the complete file at `path` as just used; False if it is absent or not of `size` bytes."""
    try:
        if os.stat(path).st_size != size:
            return False
        os.utime(path)
    except FileNotFoundError:
        return False
    return True


def _left_over(entry: os.DirEntry, pid: int) -> bool:
    """Whether the temporary `entry` of process `pid` was left by a process that died (or stalled for an hour)."""
    if time.time() - entry.stat().st_mtime > _STALE_SECONDS:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # Another user's process: alive.
    return False
