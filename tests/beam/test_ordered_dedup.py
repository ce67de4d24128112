"""A deterministic write's dedup on its chunks' shards: a chunk drops its own later duplicates, the records decide
the rest by key order, and the chunk shards holding later duplicates are copied without them; the same bytes
whatever the bundling, each duplicate counted once when bundles repeat."""

from __future__ import annotations

import random

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest

from beam_shards import ArrowBackend, Features, Value, WriteToArrowShards, read_metadata, verify
from beam_shards.beam import ordered_dedup, staged_dedup
from beam_shards.shards import DIGEST_NUMBERS, WrittenShard, row_digests

from _support import options
from test_deterministic import shard_digests

pytestmark = pytest.mark.timeout(300)

FEATURES = Features({"position": Value("int64"), "value": Value("int64"), "text": Value("string")})
COLUMNS = ["value", "text"]


def _table(values: list[int]) -> pa.Table:
    return pa.Table.from_pylist([{"position": i, "value": v, "text": str(v)} for i, v in enumerate(values)],
                                schema=FEATURES.arrow_schema())


def test_a_chunk_keeps_the_first_row_of_each_digest_and_records_its_place_in_key_order_and_on_disk():
    digester = ordered_dedup.ChunkDigester(COLUMNS, FEATURES)
    kept = digester.keep(_table([5, 3, 5, 1, 3, 5]))
    assert kept.column("position").to_pylist() == [0, 1, 3] and digester.dropped == 3
    shards = [WrittenShard("a.arrow", 2, 1, "x"), WrittenShard("b.arrow", 1, 1, "y")]
    digester.written(7, shards)
    records = np.concatenate([np.frombuffer(part, ordered_dedup.ORDERED_RECORD) for _, part in digester.take(end=True)])
    records = records[np.argsort(records["position"])]
    digests = np.frombuffer(b"".join(row_digests(kept, COLUMNS)), DIGEST_NUMBERS)
    assert (records["high"] == digests["high"]).all() and (records["low"] == digests["low"]).all()
    assert records["rank"].tolist() == [7, 7, 7] and records["position"].tolist() == [0, 1, 2]
    assert records["shard"].tolist() == [staged_dedup.shard_reference(path) for path in ("a.arrow", "a.arrow",
                                                                                          "b.arrow")]
    assert records["row"].tolist() == [0, 1, 0]
    digester.reset()
    assert digester.keep(_table([1, 2])).num_rows == 2 and digester.dropped == 0


def test_of_a_digest_the_row_first_in_key_order_is_kept_whatever_its_place_on_disk():
    records = np.zeros(3, ordered_dedup.ORDERED_RECORD)
    records["high"] = 9
    records["rank"], records["position"] = [2, 1, 1], [0, 4, 3]
    records["shard"], records["row"] = [10, 20, 30], [0, 6, 1]
    duplicates = dict(staged_dedup._duplicates((0, [records.tobytes()]), ordered_dedup.ORDERED_RECORD))
    assert {shard: np.frombuffer(rows, np.int64).tolist() for shard, rows in duplicates.items()} == {10: [0], 20: [6]}


def _values() -> list[int]:
    """Values of positions 0..299: repeats across chunks (of 32 rows), and within them (every 8th row)."""
    values = [i % 70 for i in range(300)]
    return [value - 1 if i % 8 == 7 else value for i, value in enumerate(values)]


def _write(path: str, runner: list[str], seed: int) -> None:
    pairs = [(("file", i), {"position": i, "value": v, "text": str(v)}) for i, v in enumerate(_values())]
    random.Random(seed).shuffle(pairs)
    with beam.Pipeline(options=options(*runner)) as p:
        _ = (p | beam.Create(pairs, reshuffle=True)
             | WriteToArrowShards(path, FEATURES, deterministic=True, dedup=COLUMNS, batch_size=4,
                                  shard_size_bytes=3_000))


def test_the_first_of_each_duplicate_in_key_order_is_kept_with_the_same_bytes_whatever_the_bundling(tmp_path,
                                                                                                  monkeypatch):
    digested = []
    real = ordered_dedup.ChunkDigester.keep

    def counting(self, rows):
        digested.append(rows.num_rows)
        return real(self, rows)

    monkeypatch.setattr(ordered_dedup.ChunkDigester, "keep", counting)
    seen, expected = set(), []
    for position, value in enumerate(_values()):
        if value not in seen:
            seen.add(value)
            expected.append(position)
    digests = []
    for seed, runner in enumerate([[], ["--direct_runner_bundle_repeat=1"], ["--runner=BundleBasedDirectRunner"]]):
        path = str(tmp_path / f"run{seed}")
        digested.clear()
        _write(path, runner, seed)
        manifest = read_metadata(path)
        table = ArrowBackend.open(path).slice(0, manifest.num_rows)
        assert table.column("position").to_pylist() == expected, runner
        assert manifest.metadata["dedup"] == {"columns": COLUMNS, "dropped": 300 - len(expected)}
        assert verify(path).ok
        digests.append(shard_digests(path))
        if seed == 1:
            assert sum(digested) > 300, "the bundle repeat did not fire: each chunk digested once"
    assert len(digests[0]) > 2 and all(found == digests[0] for found in digests), digests


def test_a_chunk_shard_holding_later_duplicates_is_copied_without_them(tmp_path, monkeypatch):
    copied = []
    real = ordered_dedup.batch_bytes

    def recording(shard):  # measures a copied shard's batches
        copied.append(shard.num_rows)
        return real(shard)

    monkeypatch.setattr(ordered_dedup, "batch_bytes", recording)
    _write(str(tmp_path / "cache"), [], 0)
    assert copied, "no chunk shard was copied: the test should drop some rows of a written shard"


def test_features_made_when_the_pipeline_runs_deduplicate_and_check_the_columns_then(tmp_path):
    pairs = [(i, {"position": i, "value": i % 4, "text": str(i % 4)}) for i in range(20)]
    with beam.Pipeline(options=options()) as p:
        made = p | "Features" >> beam.Create([FEATURES])
        _ = (p | beam.Create(pairs)
             | WriteToArrowShards(str(tmp_path / "ok"), made, deterministic=True, dedup=["value"], batch_size=2))
    ok = str(tmp_path / "ok")
    assert ArrowBackend.open(ok).slice(0, 4).column("position").to_pylist() == [0, 1, 2, 3]
    assert read_metadata(ok).metadata["dedup"] == {"columns": ["value"], "dropped": 16}
    with pytest.raises(Exception, match="'nope'.*'position', 'value'"):
        with beam.Pipeline(options=options()) as p:
            made = p | "Features" >> beam.Create([FEATURES])
            _ = (p | beam.Create(pairs)
                 | WriteToArrowShards(str(tmp_path / "bad"), made, deterministic=True, dedup=["nope"]))
