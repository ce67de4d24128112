"""`verify`: checks every shard of a cache against its manifest and reports all problems."""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable

from beam_shards import fs
from beam_shards.backend import read_shard_batches
from beam_shards.errors import CacheError, CacheNotFoundError, CorruptCacheError
from beam_shards.manifest import Manifest, read_metadata, size_problem
from beam_shards.writer import format_checksum

_CHUNK = 8 << 20


@dataclasses.dataclass
class VerifyReport:
    """What `verify` found: `ok` is true when `problems` is empty."""

    path: str
    manifest: Manifest | None
    problems: list[str]
    shards_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return f"VerifyReport(path={self.path!r}, ok={self.ok}, shards_checked={self.shards_checked}, problems={len(self.problems)})"


def verify(path: str, *, on_shard: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Checks the manifest and every shard: present, size, checksum, schema, rows.

    Example:
        >>> report = verify("/tmp/my_cache")  # doctest: +SKIP
        >>> report.ok, report.problems  # doctest: +SKIP

    Args:
      path: the cache folder.
      on_shard: called with (shards done, shard count) after each shard, for progress.

    Returns:
      A report listing every problem found, not only the first.

    Raises:
      CacheNotFoundError: there is no cache at `path`.
    """
    try:
        manifest = read_metadata(path, check_files=False)
    except CacheNotFoundError:
        raise
    except CacheError as error:
        return VerifyReport(path, None, [str(error)])
    report = VerifyReport(path, manifest, [])
    for shard_id in range(manifest.num_shards):
        report.problems.extend(check_shard(manifest, shard_id))
        report.shards_checked += 1
        if on_shard is not None:
            on_shard(shard_id + 1, manifest.num_shards)
    return report


def check_shard(manifest: Manifest, shard_id: int) -> list[str]:
    """The problems of one shard (empty when it is sound)."""
    entry = manifest.shards[shard_id]
    path = manifest.shard_path(shard_id)
    try:
        crc, size = _checksum(path)
    except FileNotFoundError:
        return [f"shard {entry.path} is missing"]
    except OSError as error:
        return [f"shard {entry.path} cannot be read: {error}"]
    problems = []
    if size != entry.num_bytes:
        problems.append(size_problem(f"shard {entry.path}", size, entry.num_bytes))
    checksum = format_checksum(crc)
    if checksum != entry.checksum:
        problems.append(f"shard {entry.path} has checksum {checksum}, the manifest says {entry.checksum}")
    if size == entry.num_bytes:
        try:
            read_shard_batches(manifest, shard_id)
        except CorruptCacheError as error:
            problems.append(str(error))
    return problems


def _checksum(path: str) -> tuple[int, int]:
    crc = size = 0
    with fs.open_read(path) as handle:
        while chunk := handle.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return crc, size
