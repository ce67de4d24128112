"""An opened shard of an `ArrowBackend`: where its record batches start, and the batches read so
far, each with the row readers made from it."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.features import Features
from beam_shards.features.columns import row_getter


# (column, row reader) of each column a row holds
Readers = list[tuple[str, Callable[[int], Any]]]


class CachedBatch:
    """One record batch, checked when it was read, and the row readers made from it so far."""

    __slots__ = ("batch", "_readers")

    def __init__(self, batch: pa.RecordBatch):
        self.batch = batch
        self._readers: dict[tuple[str, tuple[str, ...]], Readers] = {}

    def readers(self, features: Features | None, image_mode: str,
                columns: tuple[str, ...]) -> Readers:
        """(name, row reader) for `columns` (all when empty), as `features` decode them in `image_mode`."""
        key = (image_mode, columns)
        readers = self._readers.get(key)
        if readers is None:
            names = columns or tuple(self.batch.schema.names)
            if features is None:
                readers = [(name, row_getter(self.batch.column(name))) for name in names]
            else:
                readers = [(name, features.row_reader(name, self.batch.column(name), image_mode)) for name in names]
            self._readers[key] = readers
        return readers


def readers_of(batches: list[CachedBatch | None], features: Features | None, image_mode: str,
               columns: tuple[str, ...]) -> list[Readers | None]:
    """`CachedBatch.readers` of each of `batches` (None stays None)."""
    return [None if batch is None else batch.readers(features, image_mode, columns) for batch in batches]


def rows_of(readers: list[Readers | None], which: list[int], positions: list[int]) -> list[dict[str, Any]]:
    """The row at each of `positions` of batch `which` (the same index into `readers`), as the dict of
    what that batch's readers give."""
    return [{name: read(p) for name, read in readers[w]} for w, p in zip(which, positions)]


class OpenShard:
    """An opened shard: the first row of each of its batches, and the batches read so far.

    A batch is read, and fully checked, when first touched. Memory-mapped batches cost
    no memory; `resident` shards (downloaded or compressed) hold real bytes, which the
    backend bounds.
    """

    __slots__ = ("starts", "firsts", "batches", "read", "resident")

    def __init__(self, batch_rows: list[int], start: int, read: Callable[[int], pa.RecordBatch], resident: bool):
        offsets = np.cumsum([0] + batch_rows, dtype=np.int64)
        # Within the shard, as Python ints: bisect on a list routes one row ~20x faster than numpy.
        self.starts = offsets.tolist()
        # In the whole cache (the shard's first row is `start`), for routing many rows at once.
        self.firsts = offsets[:-1] + start
        self.batches: list[CachedBatch | None] = [None] * len(batch_rows)
        self.read = read
        self.resident = resident

    def locate(self, local: int) -> int:
        return bisect.bisect_right(self.starts, local) - 1
