"""`later_records`: the records after the first of their digest, in memory or, past PARTITION_BYTES, a part at a
time through temporary files, with the same result."""

from __future__ import annotations

import numpy as np
import pytest

from beam_shards.shards import duplicates

pytestmark = pytest.mark.timeout(60)

RECORD = np.dtype([("high", "<u8"), ("low", "<u8"), ("shard", "<u8"), ("row", "<u8")])


def _records(count: int, seed: int = 3) -> np.ndarray:
    """Records of about count / 4 distinct digests, each row once."""
    rng = np.random.default_rng(seed)
    digests = rng.integers(0, 2**63, size=(count // 4, 2), dtype=np.uint64)
    records = np.zeros(count, RECORD)
    picked = digests[rng.integers(0, len(digests), count)]
    records["high"], records["low"] = picked[:, 0], picked[:, 1]
    records["shard"] = rng.integers(0, 5, count)
    records["row"] = np.arange(count)
    return records


def _later(records: np.ndarray, calls: list[int]) -> set[tuple[int, int]]:
    def pieces():
        calls.append(1)
        return np.array_split(records, 7)

    found = np.concatenate(list(duplicates.later_records(pieces, len(records), RECORD)))
    return set(zip(found["shard"].tolist(), found["row"].tolist()))


def _expected(records: np.ndarray) -> set[tuple[int, int]]:
    first: dict[tuple[int, int], tuple[int, int]] = {}
    for high, low, shard, row in records.tolist():
        first[(high, low)] = min(first.get((high, low), (shard, row)), (shard, row))
    kept = set(first.values())
    return {(shard, row) for _, _, shard, row in records.tolist()} - kept


def test_the_later_records_of_each_digest_in_memory_and_through_files_are_the_same(monkeypatch):
    records = _records(4000)
    calls: list[int] = []
    in_memory = _later(records, calls)
    assert in_memory == _expected(records) and len(in_memory) > 2000
    monkeypatch.setattr(duplicates, "PARTITION_BYTES", RECORD.itemsize * 500)  # 8 files
    spread = []
    real = np.fromfile

    def reading(*args, **kwargs):
        spread.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "fromfile", reading)
    assert _later(records, calls) == in_memory
    assert len(spread) == 8, "sorted a file at a time"
    assert calls == [1, 1], "the records are read once"
