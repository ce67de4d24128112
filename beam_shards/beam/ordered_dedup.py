"""Deduplication of a deterministic write (`WriteToArrowShards(..., deterministic=True, dedup=...)`) on its
chunks' staged shards: the first row of a digest in key order is kept, and only digests cross a shuffle.

The chunk step (`ordered_steps.WriteChunkFn`) holds a chunk's rows in key order before it writes them;
`WriteChunkDedupFn` digests them there (`shards.row_digest`), leaves out each row of a digest
an earlier row of the chunk has (counted in the `DROPPED_TAG` output), and makes a record of
each row written: its digest, its place in key order (the chunk's rank, then its row in the
chunk) and its place on disk (its shard's reference and its row there), sent on in buckets
of digests in the `DIGESTS_TAG` output, as the non-deterministic write's are (`staged_dedup`).
`staged_dedup.DropStagedDuplicates` then sorts each bucket's records by digest and key order and
copies the chunk shards holding a later row of a digest without it (a rare case: a chunk
holds the rows of neighbouring keys), their batch sizes taken from the copy for the merge plan
(`resized`). Memory: one chunk's digests, and what `staged_dedup` says.

Whatever the bundling, the same rows are kept and written in the same shards: a chunk drops
its own duplicates alone, and the records decide the rest by key order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from apache_beam.pvalue import TaggedOutput
from apache_beam.transforms import window

from beam_shards.beam.staging import BundleWriter
from beam_shards.beam.ordered_steps import WriteChunkFn
from beam_shards.beam.ordered_bins import batch_bytes
from beam_shards.beam.staged_dedup import DIGESTS_TAG, DROPPED_TAG, HeldRecords, check_columns, shard_reference
from beam_shards.features import Features
from beam_shards.shards import DIGEST_NUMBERS, WriterOptions, WrittenShard, row_digests

# The record of a row written: its digest (`DIGEST_NUMBERS`), its place in key order and its place on disk.
ORDERED_RECORD = np.dtype([("high", "<u8"), ("low", "<u8"), ("rank", "<u8"), ("position", "<u8"),
                           ("shard", "<u8"), ("row", "<u8")])


class ChunkDigester:
    """Digests a chunk's rows over `columns` (None: every column), leaves out those of a digest an
    earlier row of the chunk has (`keep`, counted in `dropped`), and holds the record of each row
    written (`written`) until `take`n.

    Raises:
      FeatureError: a column of `columns` that `features` do not have.
    """

    def __init__(self, columns: list[str] | None, features: Features):
        check_columns(columns, features)
        self._columns = columns
        self._held = HeldRecords()
        self.reset()

    def reset(self) -> None:
        """Forgets the bundle so far: what it held and dropped (as for a failed bundle)."""
        self._held.reset()
        self._kept = np.zeros(0, DIGEST_NUMBERS)
        self.dropped = 0

    def keep(self, rows: pa.Table) -> pa.Table:
        """`rows` without the rows of a digest an earlier row has."""
        digests = np.frombuffer(b"".join(row_digests(rows, self._columns)), DIGEST_NUMBERS)
        _, first = np.unique(digests, return_index=True)
        if len(first) == len(digests):
            self._kept = digests
            return rows
        first.sort()
        self._kept = digests[first]
        self.dropped += len(digests) - len(first)
        mask = np.zeros(len(digests), dtype=bool)
        mask[first] = True
        return rows.filter(pa.array(mask))

    def written(self, rank: int, shards: list[WrittenShard]) -> None:
        """Records the rows last kept, written into `shards` in order, of the chunk of `rank`."""
        records = np.empty(len(self._kept), ORDERED_RECORD)
        records["high"], records["low"] = self._kept["high"], self._kept["low"]
        records["rank"] = rank
        records["position"] = np.arange(len(records))
        records["shard"] = np.repeat([shard_reference(shard.path) for shard in shards],
                                     [shard.num_rows for shard in shards])
        records["row"] = np.concatenate([np.arange(shard.num_rows) for shard in shards])
        self._held.add(records)

    def take(self, end: bool) -> list[tuple[int, bytes]]:
        """`staged_dedup.HeldRecords.take`."""
        return self._held.take(end)


class WriteChunkDedupFn(WriteChunkFn):
    """`ordered_steps.WriteChunkFn` that leaves out a chunk's own duplicates, counted in the `DROPPED_TAG`
    output at the bundle's end, and sends the records of the rows written to the `DIGESTS_TAG`
    output (see the module), over `dedup` ("rows" or a list of columns)."""

    def __init__(self, path: str, features: Features | None, options: WriterOptions, write_id: str | None,
                 dedup: str | list[str]):
        super().__init__(path, features, options, write_id)
        self._columns = None if dedup == "rows" else list(dedup)
        self._digester: ChunkDigester | None = None

    def _use(self, features: Features) -> BundleWriter:
        self._digester = ChunkDigester(self._columns, features)
        return super()._use(features)

    def start_bundle(self) -> None:
        if self._digester is not None:
            self._digester.reset()

    def process(self, element: Any, write_id: Any, chunk_ranks: dict[Any, int],
                features: Features | None = None) -> Iterator[Any]:
        shards = []
        for item in super().process(element, write_id, chunk_ranks, features):
            shards.append(item[1])
            yield item
        self._digester.written(chunk_ranks[element[0]], shards)
        yield from (TaggedOutput(DIGESTS_TAG, part) for part in self._digester.take(end=False))

    def _kept(self, rows: pa.Table) -> pa.Table:
        return self._digester.keep(rows)

    def finish_bundle(self) -> Iterator[Any]:
        if self._digester is None:
            return
        outputs = [TaggedOutput(DIGESTS_TAG, part) for part in self._digester.take(end=True)]
        if self._digester.dropped:
            outputs.append(TaggedOutput(DROPPED_TAG, self._digester.dropped))
        for output in outputs:
            yield TaggedOutput(output.tag, window.GlobalWindows.windowed_value(output.value))


def resized(copy: WrittenShard, rest: tuple[Any, ...], features: Features, options: WriterOptions) -> tuple[Any, ...]:
    """The `(order, batch bytes)` of a chunk's shard copied without its duplicates (`copy`): its order
    as before, and its batches' bytes as the copy's writer wrote them (the features and options
    are those of `staged_dedup`'s resize, unused here)."""
    order, _ = rest
    return order, batch_bytes(copy)
