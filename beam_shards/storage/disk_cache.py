"""A local disk cache of whole shard files fetched from an object store, shared by every process on the machine.

Layout of the cache folder:
  `<32 hex>-crc32-<8 hex>-<size>.arrow`  a complete file: the shard whose store URI has a SHA-256 starting with
                                         those 32 hex digits, of that checksum and size, checked before it got
                                         this name;
  `<that name>.tmp-<pid>-<16 hex>`       a download in progress (never served), a random name created exclusively;
  `<that name>.lock`                     the lock one download of that file holds (empty, kept);
  `.evict.lock`                          the lock an eviction holds;
  `crc32-<8 hex>-<size>.arrow`           a file of an earlier layout, named without its URI: never served, counted
                                         and evicted like the others (and its `.tmp-` files cleaned up the same way).

The folder is its user's alone: made with mode 0700, and refused (`CacheError`) when it is a link, another
user's, or writable by others, since whoever can write in it could plant a link where a download is written. No
file is written through a link: a download's temporary is created exclusively (`local_files.create_new`), a
complete file is opened without following one (a link there is replaced like a damaged file), renames and
deletes act on names.

Shards are immutable and named by where they are stored, their checksum and their size, so a file under its final
name is never stale, and caches sharing the folder never serve each other's shards, however alike their sizes and
checksums. A download streams into a temporary file, is checked and synced, then renamed into place in one step: a
reader sees the whole file or none. Each name has its own lock, so processes that want the same shard wait for one
download and then reuse it, while different shards download in parallel. Each use sets a file's mtime; after a
download the least recently used files are deleted until the folder holds at most `max_bytes`.

A file can still be damaged in place after its rename (a bad disk, a stray write), so each process reads and checks
a file once before it first serves it, and replaces a bad one with a fresh download. A reader that checks every part
of a file it reads (a format-5 shard, whose record batches each have a CRC-32) asks for the file without that whole
read (`whole_check=False`), and hands back a copy it found damaged with `refetch`. When the cache folder cannot
be written (full disk, quota, read-only, permissions, I/O errors), `get` returns None, so the shard is read from the
store with ranged reads instead, and warns once per process and folder.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import time
import warnings
from collections.abc import Callable, Iterator
from typing import BinaryIO

import filelock

from beam_shards.errors import CorruptCacheError
from beam_shards.storage.checksum import CHECKSUM_PATTERN, Crc32
from beam_shards.storage.local_files import create_new, private_folder

_CHUNK = 4 << 20
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_URI_DIGITS = 32
_FILE = re.compile(rf"(?:[0-9a-f]{{{_URI_DIGITS}}}-)?crc32-[0-9a-f]{{8}}-\d+\.arrow")
_TEMPORARY = re.compile(rf"{_FILE.pattern}\.tmp-(\d+)-[0-9a-f]+")
_STALE_SECONDS = 3600
"""A temporary not written to for this long is left over, even if a process with its pid runs (pids are reused)."""

_VERIFIED: set[tuple[str, int, int]] = set()
"""(path, device, inode) of every cached file this process read and checked, or wrote: served without a read.
A forked child inherits its parent's, as it inherits what the parent checked."""
_WARNED: set[str] = set()
"""The cache folders this process warned about (once each)."""


class DiskCache:
    """A local folder of whole, verified shard files, keyed by store URI and checksum, shared by every process on
    the machine.

    Every process may hold its own `DiskCache` on the same folder: they coordinate through file locks only, so
    an instance pickles and works after fork. `hits`, `misses` and `bytes_fetched` count this instance's work in
    this process.

    Example:
        >>> cache = DiskCache("/tmp/shard_cache", max_bytes=10 << 30)  # doctest: +SKIP
        >>> path = cache.get(uri, shard.checksum, shard.num_bytes, lambda: FileSystems.open(uri))  # doctest: +SKIP

    Args:
      cache_dir: the folder (created with mode 0700 at the first download).
      max_bytes: the most bytes of complete files the folder keeps; a larger file is never cached.

    Raises:
      ValueError: `cache_dir` is empty or `max_bytes` is not a positive int.
      CacheError: `cache_dir` exists but is not this user's alone (see `local_files.private_folder`).
    """

    def __init__(self, cache_dir: str, max_bytes: int):
        if not isinstance(cache_dir, str) or not cache_dir:
            raise ValueError(f"cache_dir must be a folder path, got {cache_dir!r}")
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
            raise ValueError(f"max_bytes must be a positive number of bytes, got {max_bytes!r}")
        self.cache_dir = os.path.abspath(cache_dir)
        private_folder(self.cache_dir, create=False)
        self.max_bytes = max_bytes
        self.hits = self.misses = self.bytes_fetched = 0

    def __repr__(self) -> str:
        return f"DiskCache({self.cache_dir!r}, max_bytes={self.max_bytes})"

    def get(self, uri: str, key: str, size: int, fetch: Callable[[], BinaryIO], whole_check: bool = True) -> str | None:
        """The local path of the complete file at `uri`, of checksum `key` and `size` bytes, fetched with `fetch()`
        if absent or damaged.

        The first time a process is handed a file it has not checked, the file is read and checked; a damaged one
        is deleted and fetched again. Another process may evict the file once it is returned (when newer uses push
        it out of `max_bytes`): open it at once, and call `get` again if it is gone. A file stays readable while it
        is open or memory-mapped.

        Args:
          uri: where the file is stored, like `"s3://bucket/cache/shard-...arrow"`.
          key: the file's checksum as its manifest writes it, like `"crc32:0a1b2c3d"`.
          size: its size in bytes.
          fetch: opens a readable binary stream of the remote file; called at most once.
          whole_check: read a file this process has not checked whole before serving it; without, a file of the
            right size is served as it is (its reader checks what it reads). A download is checked whole either way.

        Returns:
          The path, or None (read the remote file in ranges instead) when `size` exceeds `max_bytes`, or when the
          cache folder cannot be read or written (warned once per process and folder; nothing partial is kept).

        Raises:
          ValueError: `uri` is not a path, `key` not a checksum or `size` not a count of bytes.
          CacheError: the cache folder is not this user's alone (checked before each download).
          CorruptCacheError: the fetched bytes do not have `size` or checksum `key`; nothing was kept.
          Whatever `fetch()` or reading its stream raises; nothing was kept.
        """
        path = os.path.join(self.cache_dir, _file_name(uri, key, size))
        if size > self.max_bytes:
            return None
        try:
            return self._get(uri, key, size, fetch, path, whole_check)
        except _StoreError as failure:
            error = failure.error
        except OSError as failure:
            if self.cache_dir not in _WARNED:
                _WARNED.add(self.cache_dir)
                warnings.warn(f"the disk cache in {self.cache_dir} cannot be used ({failure}); reading shards from "
                              f"the store with ranged reads instead", RuntimeWarning, stacklevel=2)
            return None
        raise error  # Outside the handler above, so the store's error keeps its own context.

    def refetch(self, uri: str, key: str, size: int, fetch: Callable[[], BinaryIO],
                damaged: tuple[int, int]) -> str | None:
        """`get` after a reader found the copy it read damaged: the file of identity `damaged` (device, inode) is
        deleted, under the lock its downloads take, if it is still there (another process may have replaced it
        already), and the file is fetched again and checked whole.

        Returns and raises as `get`.
        """
        path = os.path.join(self.cache_dir, _file_name(uri, key, size))
        with contextlib.suppress(OSError):  # gone already, or a folder that cannot be written (`get` says so)
            with filelock.FileLock(path + ".lock"):
                info = os.stat(path, follow_symlinks=False)
                if (info.st_dev, info.st_ino) == damaged:
                    os.remove(path)
        return self.get(uri, key, size, fetch)

    def _get(self, uri: str, key: str, size: int, fetch: Callable[[], BinaryIO], path: str,
             whole_check: bool = True) -> str:
        """`get` for a file that fits, at `path`.

        Raises:
          _StoreError: `fetch()` or its stream raised an OSError.
          OSError: the cache folder cannot be read or written.
          CorruptCacheError: as `get`.
        """
        if _complete(path, key, size, whole_check):
            self.hits += 1
            return path
        private_folder(self.cache_dir, create=True)
        with filelock.FileLock(path + ".lock"):
            if _complete(path, key, size):  # Another process downloaded it while this one waited.
                self.hits += 1
                return path
            self._download(uri, key, size, fetch, path)
        self.misses += 1
        self._evict(keep=path)
        return path

    def _download(self, uri: str, key: str, size: int, fetch: Callable[[], BinaryIO], path: str) -> None:
        """Streams `fetch()` into a temporary, checks it, and renames it to `path`; leaves nothing else behind.

        Raises:
          _StoreError: `fetch()` or its stream raised an OSError.
          OSError: writing in the cache folder failed.
          CorruptCacheError: as `get`.
        """
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)  # Damaged or of the wrong size: absent.
        temporary = _temporary_name(path)
        crc = Crc32()
        out = create_new(temporary)
        try:
            with out, contextlib.closing(_stream(fetch, size)) as chunks:
                for chunk in chunks:
                    crc.update(chunk)
                    self.bytes_fetched += len(chunk)
                    out.write(chunk)
                if (crc.checksum(), crc.size) != (key, size):
                    found = f"{crc.size} bytes" if crc.size <= size else f"more than {size} bytes"
                    raise CorruptCacheError(f"the download of {uri} into {self.cache_dir} has {found} with checksum "
                                            f"{crc.checksum()}; expected {size} bytes with checksum {key}")
                out.flush()
                os.fsync(out.fileno())
                written = os.fstat(out.fileno())
            # The data is synced before the rename, so even after a power cut the name holds the whole file (or,
            # if the rename itself was lost, nothing: a cache may forget).
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(temporary)
            raise
        _VERIFIED.add((path, written.st_dev, written.st_ino))

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
                            stat = entry.stat(follow_symlinks=False)
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


class _StoreError(Exception):
    """An OSError of the store (`fetch()` or its stream), carried past `get`'s handler of the cache folder's
    OSErrors and raised as it was."""

    def __init__(self, error: OSError):
        super().__init__(error)
        self.error = error


def _stream(fetch: Callable[[], BinaryIO], size: int) -> Iterator[bytes]:
    """The chunks of the stream `fetch()` opens, up to one chunk past `size` bytes, so a wrong stream cannot fill
    the disk.

    Raises:
      _StoreError: carrying the OSError `fetch()` or the stream raised.
    """
    try:
        with fetch() as stream:
            read = 0
            while read <= size and (chunk := stream.read(_CHUNK)):
                read += len(chunk)
                yield chunk
    except OSError as error:
        raise _StoreError(error) from error


def _file_name(uri: str, key: str, size: int) -> str:
    """The file name of `uri`, `key` and `size`, all checked: a manifest is untrusted and must not name a path."""
    if not isinstance(uri, str) or not uri:
        raise ValueError(f"a cached file's URI must be a path, got {uri!r}")
    if not isinstance(key, str) or not CHECKSUM_PATTERN.fullmatch(key):
        raise ValueError(f"a cached file's key must be a checksum like 'crc32:0a1b2c3d', got {key!r}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError(f"the size of {key} must be a count of bytes, got {size!r}")
    where = hashlib.sha256(uri.encode()).hexdigest()[:_URI_DIGITS]
    return f"{where}-crc32-{key[len('crc32:'):]}-{size}.arrow"


def _temporary_name(path: str) -> str:
    """A name for a download into `path` that no other download uses (random, so none can be foreseen)."""
    return f"{path}.tmp-{os.getpid()}-{secrets.token_hex(8)}"


def _complete(path: str, key: str, size: int, whole_check: bool = True) -> bool:
    """Whether `path` holds the whole file of checksum `key` and `size` bytes; if so, marks it as just used.

    A file this process has not checked yet is read whole and checked (unless not `whole_check`); one that is
    absent, of another size, damaged or a link gives False.

    Raises:
      OSError: the file cannot be read or marked used (other than being absent or a link).
    """
    try:
        with os.fdopen(os.open(path, _READ_FLAGS), "rb") as handle:
            stat = os.fstat(handle.fileno())
            if stat.st_size != size:
                return False
            identity = (path, stat.st_dev, stat.st_ino)
            if whole_check and identity not in _VERIFIED:
                crc = Crc32()
                while chunk := handle.read(_CHUNK):
                    crc.update(chunk)
                if (crc.checksum(), crc.size) != (key, size):
                    return False
                _VERIFIED.add(identity)
            os.utime(handle.fileno())
    except FileNotFoundError:
        return False
    except OSError as error:
        if error.errno == errno.ELOOP:  # a link where a file should be: replaced by a download
            return False
        raise
    return True


def _left_over(entry: os.DirEntry, pid: int) -> bool:
    """Whether the temporary `entry` of process `pid` was left by a process that died (or stalled for an hour)."""
    if time.time() - entry.stat(follow_symlinks=False).st_mtime > _STALE_SECONDS:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # Another user's process: alive.
    return False
