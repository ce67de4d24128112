"""The tfrecord pipeline on TFRecords written by an independent writer (the `tfrecord`
package from the package index, not TensorFlow and not our code), and TFDS folders."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
import zlib

import numpy as np
import pytest
import tfrecord as tfrecord_package
from tfrecord import example_pb2 as independent_pb2

from beam_shards import Array, ClassLabel, Features, Image, Sequence, ShardedDataset, Value
from beam_shards.errors import FeatureError
from beam_shards.format.layout import MANIFEST_NAME
from beam_shards.versions.bad_inputs import read_bad_inputs
from pipelines import common, tf_example, tfds, tfrecord as pipeline, tfrecord_io
from pipelines.where import Where

import fake_object_store
from _support import jpeg, png

TIMEOUT = pytest.mark.timeout(180)


def write(path, rows: list[dict]) -> list[int]:
    """Writes `rows` ({name: (value, "byte"|"int"|"float")}) with the independent writer;
    returns each record's byte offset."""
    writer = tfrecord_package.TFRecordWriter(str(path))
    offsets = []
    for row in rows:
        offsets.append(writer.file.tell())
        writer.write(row)
    writer.close()
    return offsets


def row(i: int, *, label=True) -> dict:
    data = {
        "image": (png(i) if i % 2 else jpeg(i), "byte"),
        "caption": (f"example {i} ü".encode(), "byte"),
        "embedding": ([float(i), 0.5, -1.25, 2.0], "float"),
        "tokens": (list(range(i % 4)), "int"),
        "blob": (bytes([0xFF, i % 256, 0x00]), "byte"),
    }
    if label:
        data["label"] = (i % 3, "int")
    return data


def rows_by(path, key: str) -> dict:
    return {r[key]: r for r in ShardedDataset(str(path), image_mode="bytes")}


def flip_byte(path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


# --- the format, against the independent writer -----------------------------------------

def test_our_schema_parses_what_the_independent_protobuf_schema_writes():
    example = independent_pb2.Example(features=independent_pb2.Features(feature={
        "b": independent_pb2.Feature(bytes_list=independent_pb2.BytesList(value=[b"x", b""])),
        "f": independent_pb2.Feature(float_list=independent_pb2.FloatList(value=[1.5, -2.0])),
        "i": independent_pb2.Feature(int64_list=independent_pb2.Int64List(value=[-(2**63), 2**63 - 1])),
        "empty": independent_pb2.Feature(),
    }))
    assert tf_example.inspect(example.SerializeToString()) == {
        "b": ("bytes_list", [b"x", b""]), "f": ("float_list", [1.5, -2.0]),
        "i": ("int64_list", [-(2**63), 2**63 - 1]), "empty": (None, [])}
    with pytest.raises(ValueError, match="not a tf.train.Example"):
        tf_example.parse(b"\xff\xff\xff")


def test_read_records_gives_numbers_offsets_and_data(tmp_path):
    path = tmp_path / "a.tfrecord"
    offsets = write(path, [row(i) for i in range(5)])
    with open(path, "rb") as handle:
        records = list(tfrecord_io.read_records(handle))
    assert [(number, offset) for number, offset, _ in records] == list(enumerate(offsets))
    assert tf_example.inspect(records[3][2])["tokens"] == ("int64_list", [0, 1, 2])
    assert tfrecord_io.masked_crc32c(b"") == struct.unpack("<I", tfrecord_package.TFRecordWriter.masked_crc(b""))[0]


def test_read_records_reports_a_corrupt_record_and_goes_on(tmp_path):
    path = tmp_path / "a.tfrecord"
    offsets = write(path, [row(i) for i in range(4)])
    flip_byte(path, offsets[1] + 12 + 5)  # inside record 1's data
    with open(path, "rb") as handle:
        records = list(tfrecord_io.read_records(handle))
    assert len(records) == 4
    assert isinstance(records[1][2], common.Malformed) and "CRC of its" in records[1][2].reason
    assert all(isinstance(data, bytes) for _, _, data in records[:1] + records[2:])


def test_read_records_stops_at_a_corrupt_header_or_a_truncated_file(tmp_path):
    path = tmp_path / "a.tfrecord"
    offsets = write(path, [row(i) for i in range(4)])
    data = path.read_bytes()
    for cut, expected in [(offsets[2] + 5, "ends 5 bytes into a record header"),
                          (offsets[2] + 40, "the file is truncated: the record holds")]:
        path.write_bytes(data[:cut])
        with open(path, "rb") as handle:
            records = list(tfrecord_io.read_records(handle))
        assert len(records) == 3 and records[2][:2] == (2, offsets[2])
        assert expected in records[2][2].reason
    path.write_bytes(data)
    flip_byte(path, offsets[1] + 2)  # record 1's length
    with open(path, "rb") as handle:
        records = list(tfrecord_io.read_records(handle))
    assert len(records) == 2 and "corrupt record header" in records[1][2].reason


# --- inference ----------------------------------------------------------------------------

def test_inference_rules():
    records = [{"img": ("bytes_list", [jpeg(i)]), "n": ("int64_list", [i]), "x": ("float_list", [0.5]),
                "fixed": ("float_list", [1.0, 2.0]), "var": ("int64_list", [1] * i), "s": ("bytes_list", [b"a"]),
                "bin": ("bytes_list", [b"\xff"]), "imgs": ("bytes_list", [png(i), png(i + 1)]),
                "words": ("bytes_list", [b"a"] * (i + 2))} for i in range(3)]
    records[1].pop("x")
    records[2]["n"] = ("int64_list", [])
    features = pipeline.infer_features(records)
    assert dict(features) == {
        "bin": Value("binary", nullable=True), "fixed": Array((2,), "float32", nullable=True),
        "img": Image(nullable=False), "imgs": Sequence(Image(), nullable=True), "n": Value("int64", nullable=True),
        "s": Value("string", nullable=True), "var": Sequence(Value("int64"), nullable=True),
        "words": Sequence(Value("string"), nullable=True), "x": Value("float32", nullable=True)}
    labelled = pipeline.infer_features(records, label_column="n", label_values=[0, 4, None])
    assert labelled["n"] == ClassLabel(num_classes=5, nullable=True)


@pytest.mark.parametrize("records, message", [
    ([{"a": ("int64_list", [1])}, {"a": ("float_list", [1.0])}], "float_list in some records"),
    ([{"a": (None, [])}], "holds no list"),
    ([], "no records"),
])
def test_inference_errors_name_the_feature(records, message):
    with pytest.raises(FeatureError, match=message):
        pipeline.infer_features(records)


def test_a_value_that_does_not_fit_names_the_feature():
    reader = tf_example.ExampleReader(Features({"n": Value("int64"), "v": Array((2,), "float32")}))
    serialize = tfrecord_package.TFRecordWriter.serialize_tf_example
    assert reader(serialize({"n": (3, "int"), "v": ([1.0, 2.0], "float")}))["n"] == 3
    with pytest.raises(ValueError, match=r"feature 'n' \(Value\('int64'\)\) holds 2 values, expected one"):
        reader(serialize({"n": ([3, 4], "int"), "v": ([1.0, 2.0], "float")}))
    with pytest.raises(ValueError, match=r"feature 'v' .* holds 3 values, Array\(\(2,\), 'float32'\) needs 2"):
        reader(serialize({"n": (3, "int"), "v": ([1.0, 2.0, 3.0], "float")}))
    with pytest.raises(ValueError, match="feature 'n' .* is a float_list, expected an int64_list"):
        reader(serialize({"n": (3.0, "float"), "v": ([1.0, 2.0], "float")}))
    with pytest.raises(ValueError, match="has no feature 'v'"):
        reader(serialize({"n": (3, "int")}))


def test_records_are_parsed_into_one_batch_and_bad_ones_go_on_alone():
    features = Features({"n": Value("int64"), "image": Image()})
    serialize = tfrecord_package.TFRecordWriter.serialize_tf_example
    parse = pipeline._ToExamplesFn(features, {})
    parse.setup()
    out = list(parse.process([
        (Where("f", 0, "r0"), serialize({"n": (0, "int"), "image": (jpeg(0), "byte")})),
        (Where("f", 1, "r1"), common.Malformed("corrupt record")),
        (Where("f", 2, "r2"), serialize({"n": ([1, 2], "int"), "image": (jpeg(2), "byte")})),
        (Where("f", 3, "r3"), serialize({"n": (3, "int"), "image": (png(3), "byte")})),
    ]))
    assert [str(where) for where, _ in out] == ["r1", "r2", "r0 and 1 more record(s)"]
    assert out[2][0] == ("f", 0, "r0 and 1 more record(s)")  # the batch sorts as its first record
    assert "holds 2 values" in out[1][1].reason
    rows = out[2][1]
    assert isinstance(rows, common.Rows) and rows.table.column("n").to_pylist() == [0, 3]
    assert [str(where) for where, _ in rows.one_by_one()] == ["r0", "r3"]
    assert features.encode_batch(rows.table).num_rows == 2


# --- the pipeline end to end --------------------------------------------------------------

@TIMEOUT
def test_end_to_end_with_inferred_features(tmp_path):
    (tmp_path / "data").mkdir()
    count = 23
    rows = [row(i) for i in range(count)]
    for i in (5, 17):
        del rows[i]["caption"]  # missing from some records: nullable
    write(tmp_path / "data" / "train-00000.tfrecord", rows[:10])
    write(tmp_path / "data" / "train-00001.tfrecord", rows[10:])
    out = tmp_path / "out"
    manifest = pipeline.run(["--input", str(tmp_path / "data" / "train-*.tfrecord"), "--output", str(out),
                             "--label_column", "label", "--runner=FnApiRunner"])
    assert manifest.num_rows == count
    assert dict(manifest.features) == {
        "blob": Value("binary", nullable=True), "caption": Value("string", nullable=True),
        "embedding": Array((4,), "float32", nullable=True), "image": Image(nullable=False),
        "label": ClassLabel(num_classes=3), "tokens": Sequence(Value("int64"), nullable=True)}
    assert manifest.metadata == {"pipeline": "tfrecord", "input": str(tmp_path / "data" / "train-*.tfrecord")}
    got = {r["embedding"][0]: r for r in ShardedDataset(str(out), image_mode="bytes")}
    for i in range(count):
        r = got[float(i)]
        assert r["image"] == rows[i]["image"][0] and r["label"] == i % 3
        assert r["tokens"] == list(range(i % 4)) and r["blob"] == bytes([0xFF, i, 0])
        assert r["caption"] == (None if i in (5, 17) else f"example {i} ü")
        np.testing.assert_array_equal(r["embedding"], np.array([i, 0.5, -1.25, 2.0], np.float32))


@TIMEOUT
def test_string_labels_and_a_features_file(tmp_path):
    names = ["zebra", "ant", "cat"]
    write(tmp_path / "a.tfrecord", [{"image": (jpeg(i), "byte"), "label": (names[i % 3].encode(), "byte"),
                                     "score": (i / 2, "float")} for i in range(9)])
    out = tmp_path / "out"
    manifest = pipeline.run(["--input", str(tmp_path / "a.tfrecord"), "--output", str(out), "--label_column", "label"])
    assert manifest.features["label"] == ClassLabel(names=["ant", "cat", "zebra"])
    assert [r["label"] for r in ShardedDataset(str(out))][:3] == [2, 0, 1]

    declared = Features({"image": Image(), "label": ClassLabel(names=names), "score": Value("float64")})
    (tmp_path / "features.json").write_text(json.dumps(declared.to_dict()))
    manifest = pipeline.run(["--input", str(tmp_path / "a.tfrecord"), "--output", str(out),
                             "--features", str(tmp_path / "features.json")])
    assert manifest.features == declared
    assert [r["label"] for r in ShardedDataset(str(out))][:3] == [0, 1, 2]


@TIMEOUT
def test_a_corrupt_record_fails_naming_file_record_and_offset_or_is_skipped(tmp_path, capsys):
    path = tmp_path / "train.tfrecord"
    offsets = write(path, [row(i) for i in range(8)])
    flip_byte(path, offsets[5] + 12 + 30)
    out = tmp_path / "out"
    args = ["--input", str(path), "--output", str(out), "--label_column", "label", "--batch_size", "3"]
    where = f"{path}, record 5 (offset {offsets[5]})"
    with pytest.raises(common.BadInputError, match=f"{path}, record 5 \\(offset {offsets[5]}\\): corrupt record"):
        pipeline.run(args)
    assert not (out / MANIFEST_NAME).exists()
    assert common.main(pipeline.run, args) == 1
    err = capsys.readouterr().err
    assert f"error: {where}: corrupt record: the CRC of its" in err and "--skip_bad" in err

    manifest = pipeline.run(args + ["--skip_bad", "--max_bad", "100%"])
    assert manifest.num_rows == 7
    assert sorted(r["tokens"] for r in ShardedDataset(str(out))) == sorted(list(range(i % 4)) for i in range(8)
                                                                          if i != 5)
    (bad,) = read_bad_inputs(str(out))
    assert bad["input"] == where and "CRC" in bad["error"]


@TIMEOUT
def test_a_truncated_file_fails_or_keeps_the_records_before_the_cut(tmp_path):
    path = tmp_path / "train.tfrecord"
    offsets = write(path, [row(i) for i in range(6)])
    path.write_bytes(path.read_bytes()[:offsets[4] + 100])
    out = tmp_path / "out"
    args = ["--input", str(path), "--output", str(out), "--label_column", "label"]
    with pytest.raises(common.BadInputError, match=f"record 4 \\(offset {offsets[4]}\\): the file is truncated"):
        pipeline.run(args)
    manifest = pipeline.run(args + ["--skip_bad", "--max_bad", "100%"])
    assert manifest.num_rows == 4
    assert [bad["input"] for bad in read_bad_inputs(str(out))] == [f"{path}, record 4 (offset {offsets[4]})"]


@TIMEOUT
def test_a_record_that_does_not_fit_the_features_is_named_or_skipped(tmp_path):
    path = tmp_path / "train.tfrecord"
    rows = [row(i) for i in range(5)]
    rows[3]["embedding"] = ([1.0, 2.0], "float")
    rows[4]["image"] = (b"not an image", "byte")
    offsets = write(path, rows)
    out = tmp_path / "out"
    features = Features({"image": Image(), "embedding": Array((4,), "float32")})
    (tmp_path / "features.json").write_text(json.dumps(features.to_dict()))
    args = ["--input", str(path), "--output", str(out), "--features", str(tmp_path / "features.json")]
    with pytest.raises(common.BadInputError, match=f"record 3 \\(offset {offsets[3]}\\): feature 'embedding'"):
        pipeline.run(args)
    assert pipeline.run(args + ["--skip_bad", "--max_bad", "100%"]).num_rows == 3
    assert [bad["input"].rsplit(", ", 1)[1] for bad in read_bad_inputs(str(out))] == [
        f"record 3 (offset {offsets[3]})", f"record 4 (offset {offsets[4]})"]


@TIMEOUT
def test_compressed_files_and_a_file_that_is_not_a_tfrecord(tmp_path):
    write(tmp_path / "a.tfrecord", [row(i, label=False) for i in range(4)])
    with gzip.open(tmp_path / "b.tfrecord.gz", "wb") as handle:
        handle.write((tmp_path / "a.tfrecord").read_bytes())
    (tmp_path / "c.zz").write_bytes(zlib.compress((tmp_path / "a.tfrecord").read_bytes()))
    out = str(tmp_path / "out")
    assert pipeline.run(["--input", str(tmp_path / "b.tfrecord.gz"), "--output", out]).num_rows == 4
    assert pipeline.run(["--input", str(tmp_path / "c.zz"), "--output", out,
                         "--input_compression", "zlib"]).num_rows == 4
    (tmp_path / "d.tfrecord").write_bytes(jpeg(1))
    with pytest.raises(common.BadInputError, match="record 0 \\(offset 0\\): this is not a TFRecord file"):
        pipeline.run(["--input", str(tmp_path / "*.tfrecord"), "--output", out, "--features",
                      _features_file(tmp_path, Features({"blob": Value("binary")}))])


def _features_file(folder, features: Features) -> str:
    path = os.path.join(folder, "features.json")
    with open(path, "w") as handle:
        json.dump(features.to_dict(), handle)
    return path


def test_usage_errors(tmp_path, capsys):
    write(tmp_path / "a.tfrecord", [row(0)])
    for argv, message in [
        (["--input", str(tmp_path / "none-*.tfrecord")], "no file matches"),
        (["--input", str(tmp_path / "a.tfrecord"), "--split", "train"], "--split picks the shards of a TFDS folder"),
        (["--input", str(tmp_path / "a.tfrecord"), "--label_column", "nope"], "'nope' is not in the records"),
        (["--input", str(tmp_path)], "is a folder without dataset_info.json: give a file or a glob"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            pipeline.run(argv + ["--output", str(tmp_path / "out")])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_help_has_the_shared_flags(capsys):
    with pytest.raises(SystemExit):
        pipeline.run(["--help"])
    text = capsys.readouterr().out
    for flag in ("--output", "--shard_size", "--skip_bad", "--split", "--features", "--label_column",
                 "DataflowRunner", "FlinkRunner"):
        assert flag in text


# --- TensorFlow Datasets folders ----------------------------------------------------------

CLASSES = ["airplane", "bird", "cat"]


def _tfds_feature(cls: str, kind: str, content: dict) -> dict:
    return {"pythonClassName": f"tensorflow_datasets.core.features.{cls}", kind: content}


def _tensor(shape: list[int], dtype: str, cls: str = "tensor_feature.Tensor", encoding: str = "none") -> dict:
    return _tfds_feature(cls, "tensor", {"shape": {"dimensions": [str(d) for d in shape]}, "dtype": dtype,
                                         "encoding": encoding})


# features.json as TFDS writes it: the FeaturesDict proto (tensorflow_datasets/core/proto/
# feature.proto) in proto JSON, with int64 fields as strings; class names in <feature>.labels.txt.
TFDS_FEATURES = _tfds_feature("features_dict.FeaturesDict", "featuresDict", {"features": {
    "image": _tfds_feature("image_feature.Image", "image", {
        "shape": {"dimensions": ["16", "16", "3"]}, "dtype": "uint8", "encodingFormat": "png"}),
    "label": _tfds_feature("class_label_feature.ClassLabel", "classLabel", {"numClasses": "3"}),
    "meta": _tfds_feature("features_dict.FeaturesDict", "featuresDict", {"features": {
        "id": _tensor([], "int64", "scalar.Scalar"),
        "file_name": _tfds_feature("text_feature.Text", "text", {}),
        "quality": _tfds_feature("class_label_feature.ClassLabel", "classLabel", {"numClasses": "2"}),
    }}),
    "embedding": _tensor([4], "float32"),
    "mask": _tensor([2, 2], "uint8", encoding="zlib"),
    "boxes": _tfds_feature("sequence_feature.Sequence", "sequence", {
        "feature": _tfds_feature("bounding_boxes.BBoxFeature", "boundingBox", {
            "shape": {"dimensions": ["4"]}, "dtype": "float32"}),
        "length": "-1"}),
    "is_hard": _tensor([], "bool", "scalar.Scalar"),
}})


def _tfds_record(i: int) -> dict:
    return {
        "image": (png(i), "byte"), "label": (-1 if i == 4 else i % 3, "int"),
        "meta/id": (1000 + i, "int"), "meta/file_name": (f"img_{i}.png".encode(), "byte"),
        "meta/quality": (i % 2, "int"), "embedding": ([i, 1.0, 2.0, 3.0], "float"),
        "mask": (zlib.compress(np.full((2, 2), i, np.uint8).tobytes()), "byte"),
        "boxes": ([0.1, 0.2, 0.3, 0.4] * (i % 3), "float"), "is_hard": (i % 2, "int"),
    }


def make_tfds_folder(root, name: str = "toy", version: str = "1.0.0"):
    """A prepared TFDS folder `root/name/version/` in TFDS's own layout, with 2 train shards and 1 test shard."""
    folder = root / name / version
    folder.mkdir(parents=True)
    (folder / "features.json").write_text(json.dumps(TFDS_FEATURES, indent=2))
    (folder / "label.labels.txt").write_text("\n".join(CLASSES) + "\n")
    (folder / "meta-quality.labels.txt").write_text("low\nhigh\n")
    write(folder / f"{name}-train.tfrecord-00000-of-00002", [_tfds_record(i) for i in range(0, 5)])
    write(folder / f"{name}-train.tfrecord-00001-of-00002", [_tfds_record(i) for i in range(5, 8)])
    write(folder / f"{name}-test.tfrecord-00000-of-00001", [_tfds_record(i) for i in range(100, 102)])
    info = {
        "name": name, "version": version, "description": "A toy dataset.", "citation": "@misc{toy}",
        "location": {"urls": ["https://example.org/toy"]}, "fileFormat": "tfrecord", "moduleName": "toy.toy",
        "supervisedKeys": {"tuple": {"items": [{"featureKey": "image"}, {"featureKey": "label"}]}},
        "splits": [
            {"name": "train", "shardLengths": ["5", "3"], "numBytes": "4000",
             "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"},
            {"name": "test", "shardLengths": ["2"], "numBytes": "1000"},
        ],
    }
    (folder / "dataset_info.json").write_text(json.dumps(info, indent=2))
    (root / name / "0.9.0").mkdir()  # an older version beside it, without data
    return folder


@pytest.fixture
def tfds_folder(tmp_path):
    return make_tfds_folder(tmp_path)


def test_tfds_features_carry_class_names_shapes_and_dtypes(tfds_folder):
    features, decoders, described = tfds.tfds_features(str(tfds_folder), TFDS_FEATURES)
    assert dict(features) == {
        "boxes": Array((None, 4), "float32"), "embedding": Array((4,), "float32"), "image": Image(nullable=False),
        "is_hard": Value("bool"), "label": ClassLabel(names=CLASSES, nullable=True),
        "mask": Array((2, 2), "uint8"), "meta/file_name": Value("string"), "meta/id": Value("int64"),
        "meta/quality": ClassLabel(names=["low", "high"], nullable=True)}
    assert decoders == {"mask": "zlib"}
    assert described["image"] == {"tfds": "Image", "shape": [16, 16, 3], "dtype": "uint8", "encoding_format": "png"}
    assert described["boxes"]["tfds"] == "Sequence" and described["mask"]["encoding"] == "zlib"


@TIMEOUT
def test_tfds_folder_end_to_end(tfds_folder, tmp_path):
    out = tmp_path / "out"
    manifest = pipeline.run(["--input", str(tfds_folder), "--split", "train", "--output", str(out)])
    assert manifest.num_rows == 8
    assert manifest.features["label"].names == CLASSES
    tfds = manifest.metadata["tfds"]
    assert {key: tfds[key] for key in ("name", "version", "split", "num_examples", "num_shards", "homepage")} == {
        "name": "toy", "version": "1.0.0", "split": "train", "num_examples": 8, "num_shards": 2,
        "homepage": "https://example.org/toy"}
    assert tfds["features"]["image"]["shape"] == [16, 16, 3]
    rows = rows_by(out, "meta/id")
    assert sorted(rows) == list(range(1000, 1008))
    r = rows[1007]
    assert r["image"] == png(7) and r["label"] == 1 and r["meta/file_name"] == "img_7.png"
    assert r["meta/quality"] == 1 and r["is_hard"] is True
    np.testing.assert_array_equal(r["mask"], np.full((2, 2), 7, np.uint8))
    np.testing.assert_array_equal(r["boxes"], np.array([[0.1, 0.2, 0.3, 0.4]], np.float32))
    assert rows[1004]["label"] is None  # TFDS's -1, no label

    # The dataset folder above the version takes its latest version; --split picks the test shards.
    test = pipeline.run(["--input", str(tfds_folder.parent), "--split", "test", "--output", str(out)])
    assert test.num_rows == 2 and test.metadata["tfds"]["split"] == "test"


def test_tfds_folder_usage_errors(tfds_folder, tmp_path, capsys):
    for argv, message in [([], "give --split: one of test, train"),
                          (["--split", "validation"], "no split 'validation' (its splits: test, train)"),
                          (["--split", "train", "--label_column", "label"], "--label_column is for plain")]:
        with pytest.raises(SystemExit):
            pipeline.run(["--input", str(tfds_folder), "--output", str(tmp_path / "out")] + argv)
        assert message in capsys.readouterr().err
    os.remove(tfds_folder / "toy-train.tfrecord-00001-of-00002")
    with pytest.raises(SystemExit):
        pipeline.run(["--input", str(tfds_folder), "--split", "train", "--output", str(tmp_path / "out")])
    assert "1 shard(s) of split 'train' are missing" in capsys.readouterr().err


@TIMEOUT
def test_a_features_file_converts_a_tfds_folder_with_an_unsupported_feature(tfds_folder, tmp_path, capsys):
    spec = json.loads((tfds_folder / "features.json").read_text())
    spec["featuresDict"]["features"]["steps"] = _tfds_feature("dataset_feature.Dataset", "sequence", {})
    (tfds_folder / "features.json").write_text(json.dumps(spec))
    argv = ["--input", str(tfds_folder), "--split", "test", "--output", str(tmp_path / "out")]
    with pytest.raises(SystemExit):
        pipeline.run(argv)
    assert "'steps' is a TFDS Dataset, which is not supported" in capsys.readouterr().err
    declared = Features({"image": Image(), "label": ClassLabel(names=CLASSES, nullable=True)})
    manifest = pipeline.run(argv + ["--features", _features_file(tmp_path, declared)])
    assert manifest.features == declared and manifest.num_rows == 2
    assert manifest.metadata["tfds"]["split"] == "test" and "features" not in manifest.metadata["tfds"]


@pytest.mark.slow
@TIMEOUT
def test_an_object_store_holding_a_tfds_folder_and_plain_tfrecords(tfds_folder, tmp_path, monkeypatch):
    """Through Beam's FileSystems only: a store with GCS's semantics (no folders)."""
    bucket = tmp_path / "bucket"
    monkeypatch.setenv(fake_object_store.ROOT_ENV, str(bucket))
    shutil.copytree(tfds_folder.parent, bucket / "datasets" / "toy")
    manifest = pipeline.run(["--input", "fakeobj://datasets/toy", "--split", "train", "--output", "fakeobj://caches/toy"])
    assert manifest.num_rows == 8 and manifest.features["label"].names == CLASSES
    plain = pipeline.run(["--input", "fakeobj://datasets/toy/1.0.0/toy-train.tfrecord-*", "--output",
                          "fakeobj://caches/plain", "--label_column", "meta/quality"])
    assert plain.num_rows == 8 and plain.features["meta/quality"] == ClassLabel(num_classes=2)


def test_unsupported_tfds_features_say_so(tmp_path):
    rlds = _tfds_feature("features_dict.FeaturesDict", "featuresDict", {"features": {
        "steps": _tfds_feature("dataset_feature.Dataset", "sequence", {"feature": _tensor([], "int64")})}})
    with pytest.raises(FeatureError, match="'steps' is a TFDS Dataset, which is not supported"):
        tfds.tfds_features(str(tmp_path), rlds)
    ragged = _tfds_feature("features_dict.FeaturesDict", "featuresDict", {"features": {"r": _tensor([2, -1], "int64")}})
    with pytest.raises(FeatureError, match="unknown inner dimensions"):
        tfds.tfds_features(str(tmp_path), ragged)
