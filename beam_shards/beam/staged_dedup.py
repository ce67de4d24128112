"""Deduplication of a non-deterministic write (`WriteToArrowShards(..., dedup=...)`) on its staged
shards: only digests of rows cross a shuffle, never the rows.

- digest: the write step stages its shards as without dedup and digests each record batch
  as it writes it (`RowDigester`, the shard writer's `on_batch`; `shards.row_digest`). Each
  row goes on as `(digest, reference)` of 16 bytes each, the reference 8 bytes of blake2b of
  its staged shard's path and then its row in that shard (big-endian: references sort as
  `(shard, row)`).
- decide: grouped by digest, the row of the smallest reference is kept and every other is a
  duplicate, `(shard reference, row)`, found as the group streams by (the memory of one
  reference, whatever the rows of a digest).
- drop: the duplicates are grouped with their shard by its reference. A shard holding some
  is copied without them (`merge.merge_shards` with `drop`) into a fresh attempt folder, so a
  retried or repeated copy never collides; one holding none passes through; one holding
  nothing else is left out (its file goes with the staging). Memory: the row numbers of one
  shard's duplicates.
- count: the duplicates are counted into a PCollection of one int, which finalize takes as
  a side input (so retried or repeated bundles never count twice).

Retried or repeated bundles stage in folders of their own, so their rows' references differ,
and only a committed bundle's digests go on, as only its shards do. The shards that remain go
on to the merge step, so shard sizes come out as without dedup.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa

from beam_shards.beam import deferred
from beam_shards.errors import FeatureError
from beam_shards.features import Features
from beam_shards.format.layout import CacheLayout
from beam_shards.shards import WriterOptions, WrittenShard, merge_shards, row_digests
from beam_shards.versions.staging import staged_shards

DIGESTS_TAG = "digests"
_REFERENCE_BYTES = 8
_SHARD, _DUPLICATES = "shard", "duplicates"


def dedup_columns(dedup: Any, features: Features | None) -> list[str] | None:
    """The columns `dedup` digests (None: every column).

    Raises:
      ValueError: `dedup` is neither "rows" nor a non-empty list of column names, or names a column
        `features` do not have (when known), naming it and the features' columns.
    """
    if dedup == "rows":
        return None
    if isinstance(dedup, str) or not isinstance(dedup, Sequence) or not dedup or not all(
            isinstance(name, str) for name in dedup):
        raise ValueError(f"dedup must be None, \"rows\" or a non-empty list of column names; got {dedup!r}")
    columns = list(dict.fromkeys(dedup))
    if features is not None:
        check_columns(columns, features)
    return columns


def check_columns(columns: list[str] | None, features: Features) -> None:
    """Raises FeatureError (a ValueError) naming a column of `columns` that `features` do not have, and theirs."""
    for name in columns or ():
        if name not in features:
            raise FeatureError(f"dedup names the column {name!r}, which the features do not have; they have "
                             f"{list(features)}")


def shard_reference(path: str) -> bytes:
    """The 8 bytes that stand for a staged shard in its rows' references."""
    return hashlib.blake2b(path.encode(), digest_size=_REFERENCE_BYTES).digest()


class RowDigester:
    """The `on_batch` of a deduplicating write's shard writer: holds `(digest, reference)` of each
    row written (see the module) until taken, over `columns` (None: every column).

    Raises:
      FeatureError: a column of `columns` that `features` do not have.
    """

    def __init__(self, columns: list[str] | None, features: Features):
        check_columns(columns, features)
        self._columns = columns
        self._pending: list[tuple[bytes, bytes]] = []

    def __call__(self, path: str, first: int, batch: pa.RecordBatch) -> None:
        shard = shard_reference(path)
        rows = np.arange(first, first + batch.num_rows, dtype=">u8").tobytes()
        self._pending.extend(zip(row_digests(batch, self._columns),
                                 [shard + rows[start:start + 8] for start in range(0, len(rows), 8)]))

    def take(self) -> list[tuple[bytes, bytes]]:
        """The rows digested since the last call (all of them are dropped by a call, as for a failed bundle)."""
        pending, self._pending = self._pending, []
        return pending


def _duplicates(group: tuple[bytes, Iterable[bytes]]) -> Iterator[tuple[bytes, int]]:
    """`(shard reference, row)` of each row of a digest but the one of the smallest reference."""
    kept = None
    for reference in group[1]:
        if kept is None:
            kept = reference
            continue
        if reference < kept:
            kept, reference = reference, kept
        yield reference[:_REFERENCE_BYTES], int.from_bytes(reference[_REFERENCE_BYTES:], "big")


class _DropRowsFn(beam.DoFn):
    """A staged shard, `(write id, shard)`, without its duplicate rows: copied into a fresh attempt
    folder, passed through when it holds none, left out when it holds nothing else."""

    def __init__(self, path: str, features: Features | None, options: WriterOptions):
        self._layout = CacheLayout(path)
        self._features = features
        self._options = options

    def process(self, element: tuple[bytes, dict[str, Iterable[Any]]],
                features: Features | None = None) -> Iterator[tuple[str, WrittenShard]]:
        reference, grouped = element
        written = list(grouped[_SHARD])
        if len(written) != 1:
            raise RuntimeError(f"dedup: the duplicate rows of staged shard reference {reference.hex()} belong to "
                               f"{len(written)} staged shards ({[shard.path for _, shard in written]}); expected one")
        write_id, shard = written[0]
        rows = np.unique(np.fromiter(grouped[_DUPLICATES], dtype=np.int64))
        if not len(rows):
            yield write_id, shard
        elif len(rows) < shard.num_rows:
            yield write_id, merge_shards([shard], deferred.features_for(self._features, features),
                                         staged_shards(self._layout.new_attempt(write_id)), self._options.compression,
                                         self._options.column_types, drop=[rows])


class DropStagedDuplicates(beam.PTransform):
    """Applied to `(written, digests)`, the write step's `(write id, shard)` pairs and its `DIGESTS_TAG`
    output: returns `(shards, write_ids, dropped)`, the shards without their duplicate rows (see the
    module), the write id of every shard written, and a PCollection of one int, the rows dropped.

    Args:
      path: the cache folder.
      features: the write's features, or None when they are made as the pipeline runs (then
        `side` holds their side input).
      options: the write's options (the copies' compression and column types).
      side: the side input of features made as the pipeline runs, if any.
    """

    def __init__(self, path: str, features: Features | None, options: WriterOptions, side: tuple[Any, ...] = ()):
        super().__init__()
        self._path = path
        self._features = features
        self._options = options
        self._side = side

    def expand(self, pcolls: tuple[beam.PCollection, beam.PCollection]) -> tuple[beam.PCollection, ...]:
        written, digests = pcolls
        duplicates = (digests
                      | "GroupByDigest" >> beam.GroupByKey()
                      | "Duplicates" >> beam.FlatMap(_duplicates))
        shards = written | "ByReference" >> beam.Map(lambda item: (shard_reference(item[1].path), item))
        joined = {_SHARD: shards, _DUPLICATES: duplicates} | "WithDuplicates" >> beam.CoGroupByKey()
        kept = joined | "DropRows" >> beam.ParDo(_DropRowsFn(self._path, self._features, self._options), *self._side)
        write_ids = joined | "WriteIds" >> beam.FlatMap(lambda item: [write_id for write_id, _ in item[1][_SHARD]])
        dropped = duplicates | "CountDropped" >> beam.combiners.Count.Globally()
        return kept, write_ids, dropped
