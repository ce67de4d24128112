"""WriteToArrowShards(..., dedup=...): exact duplicates of the encoded rows are dropped, the first in key order
kept under a deterministic write, counted in the version's metadata; exactly once with repeated bundles."""

from __future__ import annotations

import json
import os
import random

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest

from beam_shards import ArrowBackend, Array, Features, Value, WriteToArrowShards, read_metadata, verify
from beam_shards.format.layout import STAGING_DIR
from beam_shards.shards import EncodedRows

from _support import digested_rows, options

pytestmark = pytest.mark.timeout(180)

FEATURES = Features({"where": Value("string"), "id": Value("int64"), "text": Value("string", nullable=True),
                     "vec": Array((2,), "float32")})
COLUMNS = ["id", "text", "vec"]


def _row(where: str, i: int, numpy: bool = False) -> dict:
    value = i % 7
    text = None if value == 5 else "" if value == 6 else str(value)
    return {"where": where, "id": np.int64(value) if numpy else value, "text": text,
            "vec": np.array([value, 0], np.float32) if numpy else [float(value), 0.0]}


def _inputs() -> list[tuple]:
    """(key, example) pairs of every kind: dicts (some with numpy values), a RecordBatch and EncodedRows."""
    pairs = [(("a", i), _row(f"a{i}", i, numpy=i % 2 == 1)) for i in range(30)]
    batch = pa.RecordBatch.from_pylist([_row(f"b{i}", i) for i in range(3, 12)])
    table = FEATURES.encode_batch(pa.Table.from_pylist([_row(f"c{i}", i + 20) for i in range(10)]))
    return pairs + [(("b", 0), batch), (("c", 0), EncodedRows(table))]


def _expected(pairs: list[tuple]) -> tuple[list[str], int]:
    """The `where` of each first row of its (id, text, vec) in key order, and the count of the others."""
    rows = []
    for key, example in sorted(pairs, key=lambda pair: pair[0]):
        if isinstance(example, EncodedRows):
            example = example.table
        items = example.to_pylist() if isinstance(example, (pa.RecordBatch, pa.Table)) else [example]
        rows.extend(items)
    seen, kept = set(), []
    for row in rows:
        identity = (int(row["id"]), row["text"], tuple(float(v) for v in row["vec"]))
        if identity not in seen:
            seen.add(identity)
            kept.append(row["where"])
    return kept, len(rows) - len(kept)


def _published(path: str) -> pa.Table:
    return ArrowBackend.open(path).slice(0, read_metadata(path).num_rows)


def test_a_deterministic_write_keeps_the_first_of_each_duplicate_in_key_order(tmp_path):
    path, pairs = str(tmp_path / "cache"), _inputs()
    random.Random(5).shuffle(pairs)
    seen = str(tmp_path / "manifest.json")
    with beam.Pipeline(options=options()) as p:
        manifest = (p | beam.Create(pairs, reshuffle=True)
                    | WriteToArrowShards(path, FEATURES, deterministic=True, dedup=COLUMNS, batch_size=8,
                                         metadata={"source": "test"}))
        _ = manifest | beam.Map(lambda m: open(seen, "w").write(json.dumps(m.metadata)))
    kept, dropped = _expected(pairs)
    assert dropped == 42  # 49 rows of 7 distinct (id, text, vec)
    assert _published(path).column("where").to_pylist() == kept  # the first of each, in key order
    metadata = {"source": "test", "dedup": {"columns": COLUMNS, "dropped": dropped}}
    assert read_metadata(path).metadata == metadata and json.load(open(seen)) == metadata
    assert verify(path).ok and not os.path.exists(os.path.join(path, STAGING_DIR))


def test_repeated_bundles_drop_and_count_each_duplicate_once_and_bad_rows_are_still_skipped(tmp_path, monkeypatch):
    digested = digested_rows(monkeypatch)
    path = str(tmp_path / "cache")
    examples = [dict(_row("same", i), where="same") for i in range(60)] + [{"where": "bad", "id": "x", "text": "",
                                                                               "vec": [0.0, 0.0]}]
    with beam.Pipeline(options=options("--direct_runner_bundle_repeat=1")) as p:
        _ = (p | beam.Create(examples)
             | WriteToArrowShards(path, FEATURES, dedup="rows", on_bad="skip", max_bad=5, batch_size=16))
    assert sum(digested) > len(examples) - 1, "the bundle repeat did not fire: each good row digested once"
    table = _published(path)
    assert sorted(table.column("id").to_pylist()) == list(range(7))
    metadata = read_metadata(path).metadata
    assert metadata["dedup"] == {"columns": "rows", "dropped": 53}
    assert metadata["bad_inputs"] == {"skipped": 1, "read": 61, "max_bad": "5"}  # the dropped rows were read
    assert verify(path).ok and not os.path.exists(os.path.join(path, STAGING_DIR))


def test_features_made_when_the_pipeline_runs_check_the_columns_then(tmp_path):
    rows = [_row("a", i % 3) for i in range(9)]
    with beam.Pipeline(options=options()) as p:
        made = p | "Features" >> beam.Create([FEATURES])
        _ = p | beam.Create(rows) | WriteToArrowShards(str(tmp_path / "ok"), made, dedup=["text"])
    assert read_metadata(str(tmp_path / "ok")).metadata["dedup"] == {"columns": ["text"], "dropped": 6}
    with pytest.raises(Exception, match="'nope'.*'where', 'id'"):
        with beam.Pipeline(options=options()) as p:
            made = p | "Features" >> beam.Create([FEATURES])
            _ = p | beam.Create(rows) | WriteToArrowShards(str(tmp_path / "bad"), made, dedup=["nope"])
    assert not os.path.exists(os.path.join(str(tmp_path / "bad"), "_metadata.json"))


@pytest.mark.parametrize("value, message", [
    (["id", "nope"], r"column 'nope', which the features do not have; they have \['where', 'id', 'text', 'vec'\]"),
    ("id", "dedup must be None, \"rows\" or a non-empty list"),
    ([], "non-empty list"),
    ([1], "list of column names"),
])
def test_a_bad_dedup_is_refused_at_construction(tmp_path, value, message):
    with pytest.raises(ValueError, match=message):
        WriteToArrowShards(str(tmp_path), FEATURES, dedup=value)

