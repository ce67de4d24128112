"""Tables of the passes of a mixture's sources that are being read at random.

Computing one position's row of a pass (`SourceStreams.row`: a key mix and a Feistel network
in Python ints) costs about 2 us; a whole pass computed at once in numpy (`SourceStreams.rows`)
about 0.05 us a row. So once a pass has been read one by one about as often as its table would
cost (a twentieth of its rows), the pass is computed whole and kept as a table, and reads of it
are lookups (a Python array of 4-byte ints: indexing one gives a Python int, as `row` does). Tables
give the rows `SourceStreams` gives, only sooner. Batches are computed as they are (`PassTables.rows`).

Only sources whose epoch reads a few passes get tables (a source repeated thousands of times an
epoch reads each pass a few times an epoch, spread over all of it: a table would seldom be read
again while kept), each source keeping the tables of as many passes as its epoch reads, and
only of sources up to `_MAX_ROWS` rows (a table is 4 bytes a row).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from beam_shards.read.mixture_streams import SourceStreams

_MAX_ROWS = 1 << 22  # a table of at most 16 MB
_MAX_PASSES = 4  # sources whose epoch reads more passes get no tables
_TABLE_COST = 20  # a table costs about as much as this fraction of its rows read one by one
_COUNTED = 64  # passes whose reads a source counts at most (random reads far apart start over)


def passes_per_epoch(count: int, length: int) -> int:
    """How many passes an epoch's `count` rows of a source of `length` rows can span (`stream_position`):
    a subsampled source's epoch reads within one pass, a repeated one's `count` consecutive positions."""
    return 1 if count <= length else -(-(count - 1) // length) + 1


def tabled(streams: SourceStreams, lengths: Sequence[int], counts: Sequence[int]) -> SourceStreams | PassTables:
    """`streams`, with tables of the passes read at random for the sources that gain by them (`PassTables`);
    `streams` itself if none does (its reads then pay nothing for tables)."""
    kept = [passes_per_epoch(count, length) if length <= _MAX_ROWS else 0 for count, length in zip(counts, lengths)]
    kept = [passes if passes <= _MAX_PASSES else 0 for passes in kept]
    return PassTables(streams, lengths, kept) if any(kept) else streams


class PassTables:
    """`SourceStreams`' rows; one position's from a table of its (source, pass) once that has been read often enough.

    A source's tables are one dict, replaced whole when a table is added (one assignment), so a
    thread reading while another builds sees each table whole or not at all. A copy (pickled to a
    DataLoader worker) starts without tables.

    Args:
      streams: the rows of each source's stream of passes.
      lengths: each source's rows.
      kept: how many passes' tables each source keeps (the latest built); 0 for none.
    """

    def __init__(self, streams: SourceStreams, lengths: Sequence[int], kept: Sequence[int]):
        self._streams = streams
        self._lengths = [int(length) for length in lengths]
        self._kept = list(kept)
        self._due = [max(1, length // _TABLE_COST) for length in self._lengths]  # reads that build a table
        self._tables: list[dict[int, array]] = [{} for _ in self._lengths]
        self._reads: list[dict[int, int]] = [{} for _ in self._lengths]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tables": [{} for _ in self._lengths], "_reads": [{} for _ in self._lengths]}

    def row(self, position: int, source: int) -> int:
        """`SourceStreams.row`: a lookup in the pass's table if it has one."""
        number, within = divmod(position, self._lengths[source])
        table = self._tables[source].get(number) or self._read(source, number)
        if table is not None:
            return table[within]
        return self._streams.row(position, source)

    def rows(self, stream: np.ndarray, sources: np.ndarray) -> np.ndarray:
        """`SourceStreams.rows`, computed: a batch's cost is numpy's fixed cost a step (about 50 us for 256
        positions, 0.04 us more a position), which finding each position's table would not cut."""
        return self._streams.rows(stream, sources)

    def _read(self, source: int, number: int) -> array | None:
        """Counts a read of pass `number` of `source`, and builds its table when the reads are enough; the table
        if built, else None."""
        if not self._kept[source]:
            return None
        counted = self._reads[source]
        reads = counted.get(number, 0) + 1
        if reads < self._due[source]:
            if len(counted) >= _COUNTED:
                counted.clear()
            counted[number] = reads
            return None
        counted.pop(number, None)
        length = self._lengths[source]
        rows = self._streams.rows(np.arange(number * length, (number + 1) * length, dtype=np.int64),
                                  np.full(length, source, dtype=np.int64))
        latest = list(self._tables[source].items())[1 - self._kept[source]:] if self._kept[source] > 1 else []
        table = array("i", rows.astype(np.intc).tobytes())
        self._tables[source] = {**dict(latest), number: table}
        return table
