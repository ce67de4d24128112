"""`verify`: checks every shard of a cache against its manifest and reports all problems."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from beam_shards.errors import CacheError, CacheNotFoundError, CorruptCacheError
from beam_shards.format.catalog import read_metadata
from beam_shards.format.manifest import Manifest, size_problem
from beam_shards.shards.shard_file import ShardFile


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


def verify(path: str, *, version: int | None = None,
           on_shard: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Checks the manifest and every shard: present, size, checksum, schema, rows.

    Example:
        >>> report = verify("/tmp/my_cache")  # doctest: +SKIP
        >>> report.ok, report.problems  # doctest: +SKIP

    Args:
      path: the cache folder.
      version: the version to check; None for the latest.
      on_shard: called with (shards done, shard count) after each shard, for progress.

    Returns:
      A report listing every problem found, not only the first.

    Raises:
      CacheNotFoundError: there is no cache at `path`.
    """
    try:
        manifest = read_metadata(path, version=version, check_files=False)
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
    shard = ShardFile.of(manifest, shard_id)
    name = shard.entry.file
    try:
        checksum, size = shard.checksum()
    except FileNotFoundError:
        return [f"shard {name} is missing"]
    except OSError as error:
        return [f"shard {name} cannot be read: {error}"]
    problems = []
    if size != shard.entry.num_bytes:
        problems.append(size_problem(f"shard {name}", size, shard.entry.num_bytes))
    if checksum != shard.entry.checksum:
        problems.append(f"shard {name} has checksum {checksum}, the manifest says {shard.entry.checksum}")
    if size == shard.entry.num_bytes:
        try:
            shard.read_batches()
        except CorruptCacheError as error:
            problems.append(str(error))
    return problems
