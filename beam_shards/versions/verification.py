"""`verify`: checks a version's shard tables and every shard against its manifest and reports all problems,
and the version files that are no versions (damaged ones the rule passes over, strays; `format.latest`).

Shards are checked one after another on a local disk (the disk is the bottleneck) and
`REMOTE_WORKERS` at a time on an object store, where each check waits on the network.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
from collections.abc import Callable

import pyarrow as pa

from beam_shards.errors import CacheError, CacheNotFoundError, CorruptCacheError
from beam_shards.format.catalog import read_metadata
from beam_shards.format.latest import resolve
from beam_shards.format.manifest import Manifest, size_problem
from beam_shards.format.table_files import BatchSpan
from beam_shards.shards.shard_file import ShardFile
from beam_shards.shards.span_reader import SpanReader, batch_part
from beam_shards.storage import fs

REMOTE_WORKERS = 16


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
    """Checks the manifest, its shard tables and every shard: present, size, checksum, schema, rows, and
    for a format-5 shard each record batch's CRC-32 and that it lies where its shard table says.

    Example:
        >>> report = verify("/tmp/my_cache")  # doctest: +SKIP
        >>> report.ok, report.problems  # doctest: +SKIP

    Args:
      path: the cache folder.
      version: the version to check; None for the latest.
      on_shard: called with (shards done, shard count) after each shard, for progress.

    Returns:
      A report listing every problem found, not only the first: those of the version
      checked, then each version file that is no version (which readers ignore).

    Raises:
      CacheNotFoundError: there is no cache at `path`.
    """
    try:
        manifest = read_metadata(path, version=version)
    except CacheNotFoundError:
        raise
    except CacheError as error:
        return VerifyReport(path, None, [str(error)])
    report = VerifyReport(path, manifest, check_tables(manifest))
    if not report.problems:  # else the shard list itself cannot be trusted
        workers = 1 if fs.is_local(path) else REMOTE_WORKERS
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for problems in pool.map(lambda shard_id: check_shard(manifest, shard_id), range(manifest.num_shards)):
                report.problems.extend(problems)
                report.shards_checked += 1
                if on_shard is not None:
                    on_shard(report.shards_checked, manifest.num_shards)
    report.problems.extend(f"{name}: {why}" for name, why in resolve(path, listed=True).ignored().items())
    return report


def check_tables(manifest: Manifest) -> list[str]:
    """The problems of a version's shard list: a shard table that does not match its version's
    header (size, checksum, Arrow data; checked as every reader loads it), an invalid entry, a
    shard listed twice."""
    try:
        names = [shard.file for shard in manifest.shards]
    except CorruptCacheError as error:
        return [str(error)]
    return [f"shard {name} is listed {count} times" for name, count in collections.Counter(names).items()
            if count > 1][:10]


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
        batches = None
        try:
            batches = shard.read_batches()
            expected = manifest.shards.batch_rows(shard_id)
            if expected is not None and [batch.num_rows for batch in batches] != expected:
                problems.append(f"shard {name} holds batches of {[b.num_rows for b in batches]} rows, its shard "
                                f"table says {expected}")
        except CorruptCacheError as error:
            problems.append(str(error))
        spans = manifest.shards.batch_spans(shard_id)
        if spans is not None:
            problems.extend(_span_problems(shard, spans, batches))
    return problems


def _span_problems(shard: ShardFile, spans: list[BatchSpan], batches: list[pa.RecordBatch] | None) -> list[str]:
    """The problems of a format-5 shard's batch spans: a batch whose bytes do not have its CRC-32, or that is
    not the batch the footer lists at its place (`batches`, None when the footer cannot be read)."""
    problems = []
    try:
        reader = SpanReader(shard, spans)
    except CorruptCacheError as error:
        return [str(error)]
    for index in range(len(spans)):
        try:
            batch = reader.read(index)
        except CorruptCacheError as error:
            problems.append(str(error))
            continue
        # Compared as bytes: by value, a batch holding a NaN is not equal to itself.
        if batches is not None and (index >= len(batches) or not batch.serialize().equals(batches[index].serialize())):
            problems.append(f"{shard.where}: {batch_part(index, spans[index])}, where its shard table says, is not "
                            "the batch its footer lists there")
    if batches is not None and len(batches) != len(spans):
        problems.append(f"{shard.where} holds {len(batches)} record batches, its shard table lists {len(spans)}")
    return problems
