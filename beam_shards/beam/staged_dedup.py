"""Deduplication of a non-deterministic write (`WriteToArrowShards(..., dedup=...)`) on its staged
shards: only digests of rows cross a shuffle, never the rows.

- digest: the write step stages its shards as without dedup and digests each record batch
  before it writes it (`RowDigester`, the shard writer's `BatchHook`; `shards.row_digest`).
  A row of a digest the bundle has written already is left out there and then (counted, as
  the bundle's, in the `DROPPED_TAG` output). Each row written makes a 32-byte record: its
  digest, its shard's reference (63 bits of blake2b of the staged path) and its row in that
  shard. A bundle sends its records on at its end (or every `HELD_RECORDS`) in the
  `DIGESTS_TAG` output, one element a bucket of digests (their first `BUCKET_BITS` bits):
  Beam's cost per element, paid for each row, would cost more than the write itself.
- decide: grouped by bucket, the records are sorted by `(digest, shard, row)` and every row
  after the first of its digest is a duplicate, sent on as `(shard reference, rows)` for each
  shard holding some. Memory: a bucket's records, 32 bytes a row over 2**BUCKET_BITS buckets
  (32 MB a billion rows), and past `duplicates.PARTITION_BYTES` they are sorted a part at a
  time through temporary files (`shards.duplicates`): bounded whatever the number of rows.
- drop: the duplicates are grouped with their shard by its reference. A shard holding some
  is copied without them (`merge.merge_shards` with `drop`) into a fresh attempt folder, so a
  retried or repeated copy never collides; one holding none passes through; one holding
  nothing else is left out (its file goes with the staging). Memory: the row numbers of one
  shard's duplicates.
- count: these duplicates and those the bundles left out are counted, a shard's and a
  bundle's at a time, and finalize adds the counts up from a side input (so retried or
  repeated bundles never count twice).

Retried or repeated bundles stage in folders of their own, so their rows' references differ,
and only a committed bundle's digests and count go on, as only its shards do. The shards that
remain go on to the merge step, so shard sizes come out as without dedup.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa

from beam_shards.beam import deferred
from beam_shards.errors import FeatureError
from beam_shards.features import Features
from beam_shards.format.layout import CacheLayout
from beam_shards.shards import (DIGEST_NUMBERS, WriterOptions, WrittenShard, later_records, merge_shards,
                                row_digests)
from beam_shards.versions.staging import staged_shards

DIGESTS_TAG, DROPPED_TAG = "digests", "dropped"
# The most digests a bundle remembers to drop its own duplicates before they are staged.
SEEN_DIGESTS = 1 << 18
# Records are shuffled in buckets by their digest's first bits, and sent on every this many.
BUCKET_BITS = 10
HELD_RECORDS = 1 << 20
# The record of a row staged: its digest (`DIGEST_NUMBERS`), its shard's reference and its row in that shard.
RECORD = np.dtype([("high", "<u8"), ("low", "<u8"), ("shard", "<u8"), ("row", "<u8")])
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


def shard_reference(path: str) -> int:
    """The number (63 bits, so any runner's int coder takes it) that stands for a staged shard in its
    rows' records."""
    return int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "big") >> 1


class RowDigester:
    """The `BatchHook` of a deduplicating write's shard writer, over `columns` (None: every column), for
    one bundle at a time (`reset` between them): `keep` digests each batch and leaves out the rows of
    a digest this bundle has written already (remembering at most `SEEN_DIGESTS` digests, at about
    100 bytes each), and `written` holds the record of each row written (see the module) until
    `take`n (`HeldRecords.take`); `dropped` counts the rows left out.

    Raises:
      FeatureError: a column of `columns` that `features` do not have.
    """

    def __init__(self, columns: list[str] | None, features: Features):
        check_columns(columns, features)
        self._columns = columns
        self._capacity = SEEN_DIGESTS
        self._held = HeldRecords()
        # The writer's step asks after each element: a call the less.
        self.take = self._held.take
        self.reset()

    def reset(self) -> None:
        """Forgets the bundle so far: what it wrote, held and dropped (as for a failed bundle)."""
        self._seen: set[bytes] = set()
        self._kept: list[bytes] = []
        self._held.reset()
        self.dropped = 0

    def keep(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        seen, kept, left_out = self._seen, [], []
        for row, digest in enumerate(row_digests(batch, self._columns)):
            if digest in seen:
                left_out.append(row)
                continue
            kept.append(digest)
            if len(seen) < self._capacity:
                seen.add(digest)
        self._kept = kept
        if not left_out:
            return batch
        self.dropped += len(left_out)
        mask = np.ones(batch.num_rows, dtype=bool)
        mask[left_out] = False
        return batch.filter(pa.array(mask))

    def written(self, path: str, first: int, batch: pa.RecordBatch) -> None:
        records = np.empty(batch.num_rows, RECORD)
        digests = np.frombuffer(b"".join(self._kept), dtype=DIGEST_NUMBERS)
        records["high"], records["low"] = digests["high"], digests["low"]
        records["shard"] = shard_reference(path)
        records["row"] = np.arange(first, first + batch.num_rows)
        self._held.add(records)


class HeldRecords:
    """A bundle's records (of any record dtype whose first field is "high") until they are sent on."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self._records: list[np.ndarray] = []
        self._held = 0

    def add(self, records: np.ndarray) -> None:
        self._records.append(records)
        self._held += len(records)

    def take(self, end: bool) -> list[tuple[int, bytes]]:
        """The records held, as `(bucket, records)` pairs, one a bucket (see the module): at the
        bundle's `end`, or once `HELD_RECORDS` are held; else none."""
        if not self._held or not end and self._held < HELD_RECORDS:
            return []
        records = np.concatenate(self._records)
        self.reset()
        buckets = records["high"] >> np.uint64(64 - BUCKET_BITS)
        order = np.argsort(buckets, kind="stable")
        records = records[order]
        numbers, starts = np.unique(buckets[order], return_index=True)
        return [(bucket, part.tobytes()) for bucket, part in zip(numbers.tolist(), np.split(records, starts[1:]))]


def _duplicates(group: tuple[int, Iterable[bytes]], record: np.dtype = RECORD) -> Iterator[tuple[int, bytes]]:
    """The rows of a bucket's records (of dtype `record`: the digest, the fields that order the rows of
    a digest, and "shard" and "row") after the first of their digest, as `(shard reference, rows)` for
    shards holding some, `rows` int64 row numbers as bytes."""
    parts = group[1]
    count = sum(len(part) for part in parts) // record.itemsize
    for later in later_records(lambda: (np.frombuffer(part, record) for part in parts), count, record):
        later = later[np.argsort(later["shard"], kind="stable")]
        shards, starts = np.unique(later["shard"], return_index=True)
        for shard, rows in zip(shards.tolist(), np.split(later["row"], starts[1:])):
            yield shard, rows.astype(np.int64).tobytes()


# What a copied shard's other items become: `resize(copy, rest, features, options)`.
Resize = Callable[[WrittenShard, tuple[Any, ...], Features, WriterOptions], tuple[Any, ...]]


class _DropRowsFn(beam.DoFn):
    """A staged shard, `(write id, shard, *rest)`, without its duplicate rows: copied into a fresh attempt
    folder (its `rest` made anew by `resize`, if given), passed through when it holds none, left out
    when it holds nothing else."""

    def __init__(self, path: str, features: Features | None, options: WriterOptions, resize: Resize | None):
        self._layout = CacheLayout(path)
        self._features = features
        self._options = options
        self._resize = resize

    def process(self, element: tuple[int, dict[str, Iterable[Any]]],
                features: Features | None = None) -> Iterator[tuple[Any, ...]]:
        reference, grouped = element
        written = list(grouped[_SHARD])
        if len(written) != 1:
            raise RuntimeError(f"dedup: the duplicate rows of staged shard reference {reference:016x} belong to "
                               f"{len(written)} staged shards ({[item[1].path for item in written]}); expected one")
        write_id, shard, *rest = written[0]
        rows = np.unique(np.concatenate([np.zeros(0, np.int64)]
                                        + [np.frombuffer(part, np.int64) for part in grouped[_DUPLICATES]]))
        if not len(rows):
            yield written[0]
        elif len(rows) < shard.num_rows:
            features = deferred.features_for(self._features, features)
            copy = merge_shards([shard], features, staged_shards(self._layout.new_attempt(write_id)),
                                self._options.compression, self._options.column_types, drop=[rows])
            yield write_id, copy, *(self._resize(copy, tuple(rest), features, self._options) if self._resize else rest)


class DropStagedDuplicates(beam.PTransform):
    """Applied to `(written, digests, dropped)`, the write step's `(write id, shard, *rest)` items and its
    `DIGESTS_TAG` and `DROPPED_TAG` outputs: returns `(shards, write_ids, dropped)`, the shards without
    their duplicate rows (see the module), the write id of every shard written, and a PCollection of
    counts of rows dropped (one a bundle that dropped some and one a shard holding duplicates), which
    add up to all of them.

    Args:
      path: the cache folder.
      features: the write's features, or None when they are made as the pipeline runs (then
        `side` holds their side input).
      options: the write's options (the copies' compression and column types).
      side: the side input of features made as the pipeline runs, if any.
      record: the dtype of the digests' records (`RECORD`; a deterministic write's order the rows
        of a digest otherwise: `ordered_dedup`).
      resize: makes a copied shard's `rest` anew (None: kept as it was).
    """

    def __init__(self, path: str, features: Features | None, options: WriterOptions, side: tuple[Any, ...] = (),
                 record: np.dtype = RECORD, resize: Resize | None = None):
        super().__init__()
        self._path = path
        self._features = features
        self._options = options
        self._side = side
        self._record = record
        self._resize = resize

    def expand(self, pcolls: tuple[beam.PCollection, ...]) -> tuple[beam.PCollection, ...]:
        written, digests, in_bundles = pcolls
        duplicates = (digests
                      | "GroupByDigest" >> beam.GroupByKey()
                      | "Duplicates" >> beam.FlatMap(_duplicates, self._record))
        shards = written | "ByReference" >> beam.Map(lambda item: (shard_reference(item[1].path), item))
        joined = {_SHARD: shards, _DUPLICATES: duplicates} | "WithDuplicates" >> beam.CoGroupByKey()
        drop = _DropRowsFn(self._path, self._features, self._options, self._resize)
        kept = joined | "DropRows" >> beam.ParDo(drop, *self._side)
        write_ids = joined | "WriteIds" >> beam.FlatMap(lambda item: [shard[0] for shard in item[1][_SHARD]])
        # A few counts, which finalize adds up (a combine would cost the runner steps of its own).
        dropped = ((duplicates | "RowsEach" >> beam.Map(lambda item: len(item[1]) // 8), in_bundles)
                   | "AllDropped" >> beam.Flatten())
        return kept, write_ids, dropped
