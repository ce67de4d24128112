"""A non-deterministic write's dedup on its staged shards: a bundle drops its own duplicates before staging them,
and only digests cross the shuffle; the staged shards holding duplicates of other rows are copied without them,
exactly once when bundles repeat."""

from __future__ import annotations

import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest

from beam_shards import ArrowBackend, Features, Value, WriteToArrowShards, read_metadata, verify
from beam_shards.beam import staged_dedup
from beam_shards.format.layout import STAGING_DIR
from beam_shards.shards import DIGEST_NUMBERS, row_digests

from _support import digested_rows, options

pytestmark = pytest.mark.timeout(180)

FEATURES = Features({"id": Value("int64"), "text": Value("string")})


def _batch(ids: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"id": i, "text": str(i)} for i in ids], schema=FEATURES.arrow_schema())


def test_a_bundle_leaves_out_its_own_duplicates_within_and_across_batches_and_counts_them():
    digester = staged_dedup.RowDigester(None, FEATURES)
    assert digester.keep(_batch([1, 2, 1, 3])).column("id").to_pylist() == [1, 2, 3]
    assert digester.keep(_batch([3, 4, 2])).column("id").to_pylist() == [4]
    assert digester.dropped == 3
    digester.reset()  # a new bundle remembers nothing of the last
    assert digester.keep(_batch([1])).num_rows == 1 and digester.dropped == 0


def test_a_bundle_remembers_at_most_seen_digests(monkeypatch):
    monkeypatch.setattr(staged_dedup, "SEEN_DIGESTS", 2)
    digester = staged_dedup.RowDigester(None, FEATURES)
    assert digester.keep(_batch([1, 2, 3, 1, 3])).column("id").to_pylist() == [1, 2, 3, 3]  # 3 was not remembered


def test_records_go_in_buckets_of_their_digest_s_first_bits_with_their_shard_and_row():
    digester = staged_dedup.RowDigester(["id"], FEATURES)
    batch = digester.keep(_batch(list(range(300))))
    digester.written("staged/part-00000.arrow", 7, batch)
    assert digester.take(end=False) == [], "held until the bundle's end"
    taken = digester.take(end=True)
    assert digester.take(end=True) == []
    records = np.concatenate([np.frombuffer(part, staged_dedup.RECORD) for _, part in taken])
    digests = np.frombuffer(b"".join(row_digests(batch, ["id"])), DIGEST_NUMBERS)
    order = np.argsort(records["row"])
    assert (records["row"][order] == np.arange(7, 307)).all()
    assert (records["high"][order] == digests["high"]).all() and (records["low"][order] == digests["low"]).all()
    assert set(records["shard"].tolist()) == {staged_dedup.shard_reference("staged/part-00000.arrow")}
    for bucket, part in taken:
        assert set((np.frombuffer(part, staged_dedup.RECORD)["high"] >> (64 - staged_dedup.BUCKET_BITS)).tolist()) == {
            bucket}


def test_records_go_on_before_the_bundle_s_end_once_many_are_held(monkeypatch):
    monkeypatch.setattr(staged_dedup, "HELD_RECORDS", 100)
    digester = staged_dedup.RowDigester(None, FEATURES)
    digester.written("staged/part-00000.arrow", 0, digester.keep(_batch(list(range(60)))))
    assert digester.take(end=False) == []
    digester.written("staged/part-00000.arrow", 60, digester.keep(_batch(list(range(60, 120)))))
    assert sum(len(part) for _, part in digester.take(end=False)) == 120 * staged_dedup.RECORD.itemsize


def test_of_a_digest_the_row_of_the_smallest_shard_and_row_is_kept_and_the_others_are_listed_by_shard():
    records = np.zeros(5, staged_dedup.RECORD)
    records["high"] = [9, 9, 9, 4, 4]
    records["shard"] = [30, 20, 20, 30, 10]
    records["row"] = [0, 5, 2, 1, 3]
    parts = [records[:2].tobytes(), records[2:].tobytes()]  # as two bundles sent them
    duplicates = {shard: sorted(np.frombuffer(rows, np.int64).tolist())
                  for shard, rows in staged_dedup._duplicates((0, parts))}
    assert duplicates == {20: [5], 30: [0, 1]}


def _rows(path: str) -> list[tuple[int, str]]:
    table = ArrowBackend.open(path).slice(0, read_metadata(path).num_rows)
    return sorted(zip(table.column("id").to_pylist(), table.column("text").to_pylist()))


def test_duplicates_of_other_shards_are_copied_out_once_with_repeated_bundles(tmp_path, monkeypatch):
    # Nothing remembered in a bundle: every duplicate goes through the shuffle of digests and the copy.
    monkeypatch.setattr(staged_dedup, "SEEN_DIGESTS", 0)
    kept = digested_rows(monkeypatch)
    # Shards of 5 rows: two pairs of shards holding the same rows (one of each pair goes whole), and a shard
    # holding two rows of another's and three of its own (one of the two is copied without those).
    ids = list(range(10)) + list(range(10)) + [0, 1, 10, 11, 12]
    path = str(tmp_path / "cache")
    with beam.Pipeline(options=options("--direct_runner_bundle_repeat=1")) as p:
        _ = (p | beam.Create([{"id": i, "text": str(i)} for i in ids])
             | WriteToArrowShards(path, FEATURES, dedup="rows", batch_size=5, max_rows_per_shard=5))
    assert sum(kept) > len(ids), "the bundle repeat did not fire"
    assert _rows(path) == [(i, str(i)) for i in range(13)]
    manifest = read_metadata(path)
    assert manifest.metadata["dedup"] == {"columns": "rows", "dropped": 12}
    assert sorted(shard.num_rows for shard in manifest.shards) == [3, 5, 5]
    assert verify(path).ok and not os.path.exists(os.path.join(path, STAGING_DIR))


def test_by_a_column_the_other_columns_of_the_kept_row_are_one_of_the_duplicates(tmp_path, monkeypatch):
    monkeypatch.setattr(staged_dedup, "SEEN_DIGESTS", 0)
    path = str(tmp_path / "cache")
    rows = [{"id": i % 3, "text": f"copy {i}"} for i in range(12)]
    with beam.Pipeline(options=options()) as p:
        _ = p | beam.Create(rows) | WriteToArrowShards(path, FEATURES, dedup=["id"], batch_size=4)
    kept = _rows(path)
    assert [i for i, _ in kept] == [0, 1, 2] and all(text in {row["text"] for row in rows if row["id"] == i}
                                                      for i, text in kept)
    assert read_metadata(path).metadata["dedup"] == {"columns": ["id"], "dropped": 9}
