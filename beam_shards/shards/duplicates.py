"""The records of rows after the first of their digest, found with bounded memory (exact deduplication).

A record is an item of a numpy structured array whose first two fields are a row's digest
as two numbers, "high" and "low" (`row_digest.DIGEST_NUMBERS`: they sort as the digest's
bytes do), and whose other fields say which row it stands for, in the order that decides
which row of a digest comes first. `later_records` sorts records by every field in turn
and keeps those after the first of their digest. Up to `PARTITION_BYTES` of records are
sorted in memory; more are first spread by digest over temporary files of about that size
each (digests are uniform), and each file is sorted alone: memory stays about
`PARTITION_BYTES` however many rows, or distinct rows, there are.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator

import numpy as np

# About how many bytes of records are sorted at a time.
PARTITION_BYTES = 64 << 20


def later_records(records: Callable[[], Iterable[np.ndarray]], count: int, dtype: np.dtype) -> Iterator[np.ndarray]:
    """The records after the first of their digest, some at a time, out of the `count` records of
    `dtype` that `records()` gives (a few arrays at a time; it is called once)."""
    partitions = -(-count * dtype.itemsize // PARTITION_BYTES)
    if partitions <= 1:
        yield _later(np.concatenate([np.zeros(0, dtype), *records()]))
        return
    with tempfile.TemporaryDirectory(prefix="beam-shards-dedup-") as folder:
        paths = [os.path.join(folder, f"{index}.bin") for index in range(partitions)]
        files = [open(path, "wb") for path in paths]
        try:
            for rows in records():
                part = rows["high"] % np.uint64(partitions)
                for index in np.unique(part).tolist():
                    rows[part == index].tofile(files[index])
        finally:
            for file in files:
                file.close()
        for path in paths:
            yield _later(np.fromfile(path, dtype))


def _later(records: np.ndarray) -> np.ndarray:
    """The records after the first of their digest, in order of every field."""
    records = records[np.lexsort(tuple(records[name] for name in reversed(records.dtype.names)))]
    later = np.zeros(len(records), dtype=bool)
    later[1:] = (records["high"][1:] == records["high"][:-1]) & (records["low"][1:] == records["low"][:-1])
    return records[later]
