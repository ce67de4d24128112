"""tfrecord's inferred features are nullable as csv's and jsonl's columns are: a feature a record lacks
(the first, or one past the records inference looked at) is null, not a failed conversion.

The TFRecords are written by an independent writer (the `tfrecord` package, not TensorFlow).
"""

from __future__ import annotations

import numpy as np
import pytest
import tfrecord as tfrecord_package

from beam_shards import Array, ClassLabel, Image, Sequence, ShardedDataset, Value
from pipelines import tfrecord as pipeline

from _support import png

pytestmark = pytest.mark.timeout(240)
ROWS = 12


def _full(i: int) -> dict:
    return {"n": (i, "int"), "text": (f"row {i}".encode(), "byte"), "vec": ([float(i), 1.0], "float"),
            "tokens": (list(range(i % 3 + 2)), "int"), "image": (png(i), "byte")}


def _write(path, records: list[dict]) -> None:
    writer = tfrecord_package.TFRecordWriter(str(path))
    for record in records:
        writer.write(record)
    writer.close()


def _convert(tmp_path, records: list[dict], *flags: str) -> list[dict]:
    _write(tmp_path / "data.tfrecord", records)
    out = tmp_path / "cache"
    manifest = pipeline.run(["--input", str(tmp_path / "data.tfrecord"), "--output", str(out), "--runner=FnApiRunner",
                             *flags])
    assert manifest.num_rows == len(records)
    return list(ShardedDataset(str(out), image_mode="bytes"))


def test_a_feature_the_first_record_lacks_is_null_there(tmp_path):
    records = [_full(i) for i in range(ROWS)]
    records[0] = {"image": records[0]["image"]}  # the first record holds only its image
    rows = _convert(tmp_path, records)
    assert rows[0] == {"n": None, "text": None, "vec": None, "tokens": None, "image": png(0)}
    assert rows[5]["n"] == 5 and rows[5]["text"] == "row 5" and rows[5]["tokens"] == [0, 1, 2, 3]
    np.testing.assert_array_equal(rows[5]["vec"], [5.0, 1.0])


def test_a_feature_a_record_past_inference_lacks_is_null_not_a_failure(tmp_path):
    """The fault: features inferred from records that all held them were not nullable, so a later record
    lacking one failed the run."""
    records = [_full(i) for i in range(ROWS)]
    records[9] = {"image": records[9]["image"]}
    records[10]["n"] = ([], "int")  # an empty list where one value is expected
    rows = _convert(tmp_path, records, "--infer_rows", "4")
    assert rows[9] == {"n": None, "text": None, "vec": None, "tokens": None, "image": png(9)}
    assert rows[10]["n"] is None and rows[10]["text"] == "row 10"
    assert [row["n"] for row in rows[:9]] == list(range(9)) and rows[11]["n"] == 11


def test_inferred_features_are_nullable_but_images_and_labels_only_where_one_is_missing():
    records = [{"n": ("int64_list", [i]), "s": ("bytes_list", [b"a"]), "bin": ("bytes_list", [b"\xff"]),
                "fixed": ("float_list", [1.0, 2.0]), "var": ("int64_list", [1] * i),
                "words": ("bytes_list", [b"w"] * (i + 2)), "img": ("bytes_list", [png(i)]),
                "label": ("int64_list", [i])} for i in range(3)]
    features = pipeline.infer_features(records, label_column="label", label_values=[0, 1, 2])
    assert dict(features) == {
        "n": Value("int64", nullable=True), "s": Value("string", nullable=True),
        "bin": Value("binary", nullable=True), "fixed": Array((2,), "float32", nullable=True),
        "var": Sequence(Value("int64"), nullable=True), "words": Sequence(Value("string"), nullable=True),
        "img": Image(nullable=False), "label": ClassLabel(num_classes=3)}
    records[1].pop("img")
    assert pipeline.infer_features(records)["img"] == Image(nullable=True)
