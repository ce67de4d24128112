"""Hostile TFRecords and TFDS folders: each fails the conversion with a clear error naming the file
and the record (or the field), or with --skip_bad is skipped and listed, in bounded memory and
time; and Hypothesis over TFRecord framing and over TFDS metadata finds no other outcome.

Each corpus is a table, one case a line: a name, what it does to the input, and words the error
must hold. Add a case by adding a line. Every test runs under a timeout, so a hang fails instead of
stalling the suite.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import pathlib
import resource
import shutil
import struct
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import tfrecord as tfrecord_package
from hypothesis import HealthCheck, given, settings, strategies as st
from tfrecord import example_pb2 as independent_pb2

from beam_shards import Array, Features, ShardedDataset, Value
from beam_shards.errors import FeatureError
from beam_shards.format.layout import MANIFEST_NAME
from beam_shards.format.manifest import MAX_DEPTH, check_metadata, json_depth
from beam_shards.versions.bad_inputs import read_bad_inputs
from pipelines import common, tf_example, tfds, tfrecord as pipeline, tfrecord_io
from pipelines.where import Where

import fake_object_store
from _hostile import SCALE, assert_clear, cases, mutate_bytes, printed_tally
from test_tfrecord import TFDS_FEATURES, _features_file, _tfds_record, row, write

pytestmark = pytest.mark.timeout(60)  # tests that need longer say so

# What reading one hostile input may take at its peak (tracemalloc), and in seconds.
MEMORY_BOUND = 32 << 20
HANG_SECONDS = 10


def header(length: int) -> bytes:
    """A TFRecord record header claiming `length` bytes of data, its length CRC valid."""
    packed = struct.pack("<Q", length)
    return packed + struct.pack("<I", tfrecord_io.masked_crc32c(packed))


def frame(data: bytes) -> bytes:
    """`data` as one TFRecord record."""
    return header(len(data)) + data + struct.pack("<I", tfrecord_io.masked_crc32c(data))


def traced(action: Callable[[], Any]) -> tuple[Any, int]:
    """`(what action() returns, the peak of the memory it took, in bytes)`."""
    tracemalloc.start()
    try:
        return action(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def read_file(path) -> list[tuple[int, int, bytes | common.Malformed]]:
    with open(path, "rb") as handle:
        return list(tfrecord_io.read_records(handle))


def attempt(action: Callable[[], Any]) -> tuple[Any, Exception | None]:
    """`(what action() returns, None)`, or `(None, the error it raised)`."""
    try:
        return action(), None
    except Exception as error:  # noqa: BLE001 - the caller checks what it is
        return None, error


# ---- 1. TFRecord framing: a length that no record may have ----------------------------------

@pytest.mark.parametrize("claimed", [2**62, 2**64 - 1, tfrecord_io.MAX_RECORD_BYTES + 1])
def test_a_header_claiming_more_than_a_record_may_hold_is_a_corrupt_header_read_no_further(tmp_path, claimed):
    path = tmp_path / "a.tfrecord"
    good = [frame(f"record {i}".encode()) for i in range(3)]
    path.write_bytes(b"".join(good) + header(claimed) + bytes(64) + frame(b"after"))
    records, peak = traced(lambda: read_file(path))
    assert [data for _, _, data in records[:3]] == [b"record 0", b"record 1", b"record 2"]
    assert len(records) == 4 and records[3][:2] == (3, sum(map(len, good)))
    refused = records[3][2]
    assert isinstance(refused, common.Malformed), refused
    assert "corrupt record header" in refused.reason and f"claims {claimed:,} bytes" in refused.reason
    assert f"{tfrecord_io.MAX_RECORD_BYTES:,}" in refused.reason
    assert peak < MEMORY_BOUND, f"reading took {peak:,} bytes at its peak"


def test_a_length_past_the_end_of_the_file_takes_no_memory_for_what_it_claims(tmp_path):
    path = tmp_path / "a.tfrecord"
    path.write_bytes(frame(b"first") + header(200 << 20) + bytes(100))
    records, peak = traced(lambda: read_file(path))
    assert records[0][2] == b"first" and "the file is truncated: the record holds 209,715,200" in records[1][2].reason
    assert peak < MEMORY_BOUND, f"reading took {peak:,} bytes at its peak"


def test_the_record_size_limit_is_a_reader_parameter(tmp_path):
    path = tmp_path / "a.tfrecord"
    path.write_bytes(frame(b"x" * 8) + frame(b"y" * 9))
    with open(path, "rb") as handle:
        records = list(tfrecord_io.read_records(handle, max_record_bytes=8))
    assert records[0][2] == b"x" * 8 and "claims 9 bytes of data, more than the 8" in records[1][2].reason


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_header_claiming_2_62_bytes_fails_naming_it_or_is_skipped_keeping_the_records_before_it(tmp_path):
    path = tmp_path / "train.tfrecord"
    write(path, [row(i) for i in range(4)])
    end = path.stat().st_size
    with open(path, "ab") as handle:
        handle.write(header(2**62) + bytes(64))
    out = str(tmp_path / "out")
    args = ["--input", str(path), "--output", out, "--label_column", "label"]
    where = f"{path}, record 4 (offset {end})"
    with pytest.raises(common.BadInputError) as failed:
        pipeline.run(args)
    for word in (where, "corrupt record header", "claims 4,611,686,018,427,387,904 bytes"):
        assert word in str(failed.value)
    assert pipeline.run(args + ["--skip_bad", "--max_bad", "100%"]).num_rows == 4
    assert sorted(r["tokens"] for r in ShardedDataset(out)) == sorted(list(range(i % 4)) for i in range(4))
    [bad] = read_bad_inputs(out)
    assert bad["input"] == where and "corrupt record header" in bad["error"]


# ---- 2a. a zlib-compressed TFDS tensor that inflates 0.5 MB to 512 MiB --------------------------

@functools.cache
def zlib_bomb(size: int = 512 << 20) -> bytes:
    """`size` zero bytes zlib-compressed (0.5 MB for 512 MiB), made without holding them."""
    compressor = zlib.compressobj(9)
    chunk = bytes(1 << 20)
    return b"".join(compressor.compress(chunk) for _ in range(size >> 20)) + compressor.flush()


def example_of(features: dict[str, bytes]) -> bytes:
    """A serialized Example of one-value bytes_lists, by the independent protobuf schema."""
    return independent_pb2.Example(features=independent_pb2.Features(feature={
        name: independent_pb2.Feature(bytes_list=independent_pb2.BytesList(value=[value]))
        for name, value in features.items()})).SerializeToString()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("feature, limit, fitting, shape", [
    (Array((2, 2), "uint8"), 4, bytes(4), (2, 2)),
    (Array((None, 4), "float32"), 1 << 20, bytes(1 << 20), (1 << 16, 4)),
], ids=["fixed shape: its size", "variable length: MAX_INFLATED_BYTES"])
def test_a_zlib_bomb_is_refused_before_it_is_inflated(monkeypatch, feature, limit, fitting, shape):
    monkeypatch.setattr(tf_example, "MAX_INFLATED_BYTES", 1 << 20)
    reader = tf_example.ExampleReader(Features({"mask": feature}), {"mask": "zlib"})
    record = example_of({"mask": zlib_bomb()})
    (_, error), peak = traced(lambda: attempt(lambda: reader(record)))
    assert_clear(error, ValueError, ["feature 'mask'", f"is zlib data that inflates past {limit:,} bytes"])
    assert peak < MEMORY_BOUND, f"reading took {peak:,} bytes at its peak"
    assert reader(example_of({"mask": zlib.compress(fitting)}))["mask"].shape == shape


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_zlib_bomb_in_a_tfds_folder_fails_naming_the_record_and_feature_or_is_skipped(tmp_path):
    records = [_tfds_record(i) for i in range(8)]
    records[6]["mask"] = (zlib_bomb(), "byte")
    folder = make_tfds_folder(tmp_path, records)
    out = str(tmp_path / "out")
    args = ["--input", str(folder), "--split", "train", "--output", out]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(common.BadInputError) as failed:
        pipeline.run(args)
    for word in (f"{folder / 'toy-train.tfrecord-00001-of-00002'}, record 1", "feature 'mask'",
                 "inflates past 4 bytes"):
        assert word in str(failed.value)
    assert pipeline.run(args + ["--skip_bad", "--max_bad", "100%"]).num_rows == 7
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) << 10
    assert grown < 100 << 20, f"the process grew its peak by {grown:,} bytes"
    [bad] = read_bad_inputs(out)
    assert "inflates past 4 bytes" in bad["error"]


# ---- 2b-d. TFDS metadata ---------------------------------------------------------------------

def make_tfds_folder(root: pathlib.Path, train: list[dict] | None = None) -> pathlib.Path:
    """The TFDS folder `root/toy/1.0.0` of tests/pipelines/test_tfrecord.py's `tfds_folder`; `train` replaces
    its 8 train records (5 in a first shard, 3 in a second)."""
    train = train or [_tfds_record(i) for i in range(8)]
    folder = root / "toy" / "1.0.0"
    folder.mkdir(parents=True)
    (folder / "features.json").write_text(json.dumps(TFDS_FEATURES, indent=2))
    (folder / "label.labels.txt").write_text("airplane\nbird\ncat\n")
    (folder / "meta-quality.labels.txt").write_text("low\nhigh\n")
    write(folder / "toy-train.tfrecord-00000-of-00002", train[:5])
    write(folder / "toy-train.tfrecord-00001-of-00002", train[5:])
    write(folder / "toy-test.tfrecord-00000-of-00001", [_tfds_record(i) for i in range(100, 102)])
    info = {"name": "toy", "version": "1.0.0", "fileFormat": "tfrecord", "location": {"urls": ["https://example.org"]},
            "supervisedKeys": {"tuple": {"items": [{"featureKey": "image"}, {"featureKey": "label"}]}},
            "splits": [{"name": "train", "shardLengths": ["5", "3"],
                        "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"},
                       {"name": "test", "shardLengths": ["2"]}]}
    (folder / "dataset_info.json").write_text(json.dumps(info, indent=2))
    return folder


def edit_json(name: str, edit: Callable[[Any], Any]) -> Callable[[pathlib.Path], None]:
    """Changes the JSON file `name` of a TFDS folder in place with `edit`."""
    def apply(folder: pathlib.Path) -> None:
        data = json.loads((folder / name).read_text())
        edit(data)
        (folder / name).write_text(json.dumps(data))
    return apply


def replace_file(name: str, content: bytes) -> Callable[[pathlib.Path], None]:
    return lambda folder: (folder / name).write_bytes(content)


def train_split(edit: Callable[[dict], Any]) -> Callable[[pathlib.Path], None]:
    return edit_json(tfds.TFDS_INFO, lambda info: edit(info["splits"][0]))


def feature_spec(name: str, edit: Callable[[dict], Any]) -> Callable[[pathlib.Path], None]:
    return edit_json(tfds.TFDS_FEATURES, lambda spec: edit(spec["featuresDict"]["features"][name]))


def only_num_shards(count: str) -> Callable[[dict], None]:
    def edit(split: dict) -> None:
        del split["shardLengths"]
        split["numShards"] = count
    return edit


def outside_shard(template: Callable[[pathlib.Path], str], link: bool = False) -> Callable[[pathlib.Path], None]:
    """A valid TFRecord at `../../outside/train.tfrecord` of the folder, and a split template naming it
    (`template(its path)`), through a link in the folder with `link`."""
    def apply(folder: pathlib.Path) -> None:
        target = folder.parent.parent / "outside" / "train.tfrecord"
        target.parent.mkdir()
        write(target, [_tfds_record(i) for i in range(3)])
        if link:
            os.symlink(target, folder / "link.tfrecord")
        train_split(lambda split: split.update(shardLengths=["3"], filepathTemplate=template(target)))(folder)
    return apply


DEEP = 100_000
# (name, what it does to the TFDS folder, words its error holds). Each is a usage error (exit 2)
# naming the folder, before anything is read or written.
TFDS_CASES = [
    ("dataset_info.json is a list", replace_file(tfds.TFDS_INFO, b"[]"),
     [tfds.TFDS_INFO, "is [], expected a JSON object"]),
    ("a shard length that is no number", train_split(lambda split: split.update(shardLengths=["abc", "3"])),
     ["dataset_info.json, split 'train': shardLengths[0] is 'abc', expected a whole number"]),
    ("a shard length past int64", train_split(lambda split: split.update(shardLengths=["9" * 5000, "3"])),
     ["shardLengths[0] is '99999", "expected a whole number"]),
    ("a number of shards that is not a count", train_split(only_num_shards("-3")),
     ["dataset_info.json, split 'train': numShards is '-3'"]),
    ("a shape of ['four']", feature_spec("embedding", lambda spec: spec["tensor"]["shape"].update(dimensions=["four"])),
     ["features.json, feature 'embedding': shape.dimensions[0] is 'four', expected a whole number"]),
    ("a shape that is a string", feature_spec("embedding", lambda spec: spec["tensor"].update(shape="4")),
     ["features.json, feature 'embedding': shape is '4', expected a JSON object"]),
    ("a dtype that is a list", feature_spec("embedding", lambda spec: spec["tensor"].update(dtype=["float32"])),
     ["features.json, feature 'embedding': dtype is ['float32'], expected a string"]),
    ("class names that are numbers", feature_spec("label", lambda spec: spec["classLabel"].update(names=[1, 2, 3])),
     ["feature 'label': names[0] is 1, expected a string"]),
    ("a labels.txt that is not UTF-8",
     lambda folder: (folder / "label.labels.txt").write_bytes(b"airplane\n\xffbird\n"),
     ["feature 'label'", "label.labels.txt is not UTF-8 text (byte 9 is 0xff)"]),
    ("a labels.txt naming a class twice", lambda folder: (folder / "label.labels.txt").write_text("a\nb\na\n"),
     ["feature 'label': class name 'a' is given more than once"]),
    ("features.json nested 100,000 deep", replace_file(
        tfds.TFDS_FEATURES, ('{"featuresDict": {"features": {"x": ' + "[" * DEEP + "]" * DEEP + "}}}").encode()),
     [tfds.TFDS_FEATURES, f"more than {tfds.MAX_JSON_DEPTH} levels deep"]),
    ("dataset_info.json nested 100,000 deep", replace_file(tfds.TFDS_INFO, b"[" * DEEP + b"]" * DEEP),
     [tfds.TFDS_INFO, f"more than {tfds.MAX_JSON_DEPTH} levels deep"]),
    ("NaN in dataset_info.json", edit_json(tfds.TFDS_INFO, lambda info: info.update(description=float("nan"))),
     [tfds.TFDS_INFO, "NaN is not a number JSON holds"]),
    ("a billion shards", train_split(only_num_shards("1000000000")),
     ["dataset_info.json, split 'train': 1,000,000,000 shards, but the dataset folder holds"]),
    ("a shard template climbing out of the folder", outside_shard(lambda target: "../../outside/{SPLIT}.tfrecord"),
     ["split 'train': shard 0 is '../../outside/train.tfrecord', outside the dataset folder"]),
    ("an absolute shard template", outside_shard(str), ["shard 0 is '/", "outside the dataset folder"]),
    ("a shard that is a link out of the folder", outside_shard(lambda target: "link.tfrecord", link=True),
     ["shard 0 is 'link.tfrecord', outside the dataset folder"]),
    ("a shard template with a glob", train_split(lambda split: split.update(filepathTemplate="*{SHARD_INDEX}")),
     ["shard 0 is '*00000', which holds a NUL or a glob character"]),
    ("location.urls that is a string", edit_json(tfds.TFDS_INFO, lambda info: info.update(location={"urls": "x"})),
     ["dataset_info.json: location.urls is 'x', expected a JSON list"]),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("edit, words", cases(TFDS_CASES))
def test_hostile_tfds_metadata_is_a_usage_error_naming_the_file_and_the_field(tmp_path, capsys, edit, words):
    folder = make_tfds_folder(tmp_path)
    edit(folder)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        pipeline.run(["--input", str(folder), "--split", "train", "--output", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for word in [f"TFDS folder {folder}: "] + words:
        assert word in err, f"{word!r} not in {err!r}"
    assert not out.exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["featuresDict", "sequence"])
def test_features_nested_past_the_limit_are_refused_without_recursing(tmp_path, kind):
    spec = {"tensor": {"shape": {"dimensions": []}, "dtype": "int64"}}
    for _ in range(5000):
        spec = {"featuresDict": {"features": {"a": spec}}} if kind == "featuresDict" else {
            "sequence": {"feature": spec, "length": "-1"}}
    with pytest.raises(FeatureError, match="FeaturesDicts and Sequences nest more than 16 levels deep"):
        tfds.tfds_features(str(tmp_path), spec)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("template", ["../outside/{SPLIT}.tfrecord", "/datasets/toy/1.0.0/x", "a/../../x",
                                      "fakeobj://datasets/other/x"])
def test_an_object_store_shard_template_may_not_leave_the_folder(tmp_path, monkeypatch, template):
    monkeypatch.setenv(fake_object_store.ROOT_ENV, str(tmp_path / "bucket"))
    local = make_tfds_folder(tmp_path / "bucket" / "datasets")
    info = json.loads((local / tfds.TFDS_INFO).read_text())
    info["splits"][0]["filepathTemplate"] = template
    with pytest.raises(FeatureError, match="shard 0 is .*, outside the dataset folder"):
        tfds.split_files("fakeobj://datasets/toy/1.0.0", info, "train")
    info["splits"][0]["filepathTemplate"] = tfds.TFDS_TEMPLATE
    assert len(tfds.split_files("fakeobj://datasets/toy/1.0.0", info, "train")[1]) == 2


# ---- 3. tf.train.SequenceExample records -----------------------------------------------------

def sequence_example(i: int, *, lists: bool = True) -> bytes:
    record = independent_pb2.SequenceExample()
    record.context.feature["id"].int64_list.value.append(i)
    if lists:
        frames = record.feature_lists.feature_list["frames"]
        for j in range(3):
            frames.feature.add().float_list.value.extend([float(i), float(j)])
    return record.SerializeToString()


def test_a_sequence_example_is_told_apart_from_an_example():
    with pytest.raises(tf_example.SequenceExampleError, match="SequenceExample records .*'frames'.*not supported"):
        tf_example.inspect(sequence_example(1))
    assert tf_example.inspect(sequence_example(1, lists=False)) == {"id": ("int64_list", [1])}
    serialize = tfrecord_package.TFRecordWriter.serialize_tf_example
    assert tf_example.inspect(serialize({"id": (1, "int")})) == {"id": ("int64_list", [1])}


@pytest.mark.timeout(300)
def test_sequence_examples_are_refused_by_name(tmp_path, capsys):
    path = tmp_path / "seq.tfrecord"
    path.write_bytes(b"".join(frame(sequence_example(i)) for i in range(3)))
    out = str(tmp_path / "out")
    with pytest.raises(SystemExit) as exit_info:
        pipeline.run(["--input", str(path), "--output", out])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"{path}, record 0 (offset 0): this file holds tf.train.SequenceExample records" in err
    assert "'frames'" in err and "they are not supported" in err
    features = _features_file(tmp_path, Features({"id": Value("int64")}))
    with pytest.raises(common.BadInputError, match=r"record 0 \(offset 0\): this file holds tf.train.SequenceExample"):
        pipeline.run(["--input", str(path), "--output", out, "--features", features])
    assert not os.path.exists(os.path.join(out, MANIFEST_NAME))


# ---- 4. fuzzing: TFRecord framing ------------------------------------------------------------

FRAMING_FEATURES = Features({"n": Value("int64"), "s": Value("string")})
VALID_RECORDS = [tfrecord_package.TFRecordWriter.serialize_tf_example({"n": (i, "int"), "s": (b"x" * i, "byte")})
                 for i in range(6)]
VALID_FILE = b"".join(frame(record) for record in VALID_RECORDS)
RECORD_STARTS = [sum(len(frame(record)) for record in VALID_RECORDS[:i]) for i in range(len(VALID_RECORDS) + 1)]
LENGTHS = (st.integers(0, 2**64 - 1) | st.integers(0, 4096)
           | st.sampled_from([2**62, 2**63, tfrecord_io.MAX_RECORD_BYTES, tfrecord_io.MAX_RECORD_BYTES + 1, 200 << 20]))


@st.composite
def tfrecord_files(draw) -> bytes:
    """Random bytes; a valid file with cuts, flips, inserted or deleted bytes; or a valid file with a
    header whose CRC holds, claiming any length, where a record starts."""
    kind = draw(st.sampled_from(["random", "mutated", "forged length"]))
    if kind == "random":
        return draw(st.binary(max_size=512))
    if kind == "mutated":
        return mutate_bytes(draw, VALID_FILE)
    start = draw(st.sampled_from(RECORD_STARTS))
    return VALID_FILE[:start] + header(draw(LENGTHS)) + draw(st.binary(max_size=64)) + VALID_FILE[start:]


@pytest.fixture(scope="module")
def framing_tally(request) -> Iterator:
    yield from printed_tally(request, lambda outcomes: (
        f"FUZZ tfrecord framing: {outcomes['cases']} cases, {outcomes['refused']} refused (a Malformed record), "
        f"{outcomes['accepted']} accepted, {outcomes['crash']} crashes, {outcomes['hang']} hangs "
        f"(slowest {outcomes['slowest ms']} ms, peak {outcomes['peak KiB']:,} KiB)"))


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("fuzz")


def check_framing(records: list[tuple[int, int, Any]]) -> None:
    """Records numbered from 0, each starting where the one before ended; only a corrupt record
    (its data CRC failed) goes on, any other Malformed ends the file."""
    offset, exact = 0, True  # a corrupt record's length is known to the reader only
    for index, (number, at, data) in enumerate(records):
        assert number == index and (at == offset if exact else at >= offset)
        if isinstance(data, bytes):
            offset, exact = at + 16 + len(data), True
        elif data.reason.startswith("corrupt record:"):
            offset, exact = at + 16, False
        else:
            assert index == len(records) - 1, data


@pytest.mark.timeout(300)
@settings(max_examples=200 * SCALE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(content=tfrecord_files())
def test_any_tfrecord_file_gives_records_or_malformed_ones_in_bounded_memory_and_time(framing_tally, fuzz_dir, content):
    path = fuzz_dir / "case.tfrecord"
    path.write_bytes(content)
    parse = pipeline._ToExamplesFn(FRAMING_FEATURES, {})
    parse.setup()
    framing_tally["cases"] += 1
    start = time.monotonic()
    try:
        def read():
            records = read_file(path)
            return records, list(parse.process([(Where("f", number), data) for number, _, data in records]))
        (records, parsed), peak = traced(read)
    except BaseException:
        framing_tally["crash"] += 1
        raise
    elapsed = time.monotonic() - start
    check_framing(records)
    refused = any(isinstance(data, common.Malformed) for _, data in parsed)
    assert all(isinstance(data, (common.Malformed, common.Rows, dict)) for _, data in parsed), parsed
    framing_tally["refused" if refused else "accepted"] += 1
    framing_tally["slowest ms"] = max(framing_tally["slowest ms"], round(1000 * elapsed))
    framing_tally["peak KiB"] = max(framing_tally["peak KiB"], peak >> 10)
    framing_tally["hang"] += elapsed > HANG_SECONDS
    assert elapsed <= HANG_SECONDS and peak < MEMORY_BOUND, (elapsed, peak)


# ---- 4. fuzzing: TFDS metadata ---------------------------------------------------------------

FUZZ_WORDS = ["-1", "0", "1", "3", "4", "1000000000", "9" * 30, "abc", "four", "../../outside/x", "/etc/passwd",
              "{SPLIT}", "{DATASET}-*", "zlib", "bytes", "none", "uint8", "float32", "string", "bool", "tfrecord",
              "train", "test", "png", "\x00", "ü", ""]
FUZZ_KEYS = ["featuresDict", "features", "tensor", "shape", "dimensions", "dtype", "encoding", "classLabel",
             "numClasses", "names", "sequence", "feature", "length", "image", "text", "translation", "languages",
             "pythonClassName", "splits", "name", "shardLengths", "numShards", "filepathTemplate", "fileFormat",
             "location", "urls", "supervisedKeys"]
JSON_SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
                | st.text(max_size=8) | st.sampled_from(FUZZ_WORDS))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda items: st.lists(items, max_size=4) | st.dictionaries(
    st.sampled_from(FUZZ_KEYS) | st.text(max_size=6), items, max_size=4), max_leaves=12)


def json_paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from json_paths(item, path + (key,))


@st.composite
def mutated_json(draw, original: Any) -> Any:
    """`original` with one to three of its values (itself included) replaced by any JSON value, or deleted."""
    data = copy.deepcopy(original)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(json_paths(data))))
        if not path:
            data = draw(JSON_VALUES)
            continue
        parent = functools.reduce(lambda node, key: node[key], path[:-1], data)
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(JSON_VALUES)
    return data


@pytest.fixture(scope="module")
def tfds_source(tmp_path_factory) -> pathlib.Path:
    return make_tfds_folder(tmp_path_factory.mktemp("tfds"))


@pytest.fixture(scope="module")
def tfds_tally(request) -> Iterator:
    yield from printed_tally(request, lambda outcomes: (
        f"FUZZ tfds metadata: {outcomes['cases']} cases, {outcomes['refused']} refused with a FeatureError, "
        f"{outcomes['accepted']} accepted ({outcomes['records malformed']} with records refused as Malformed), "
        f"{outcomes['crash']} crashes, {outcomes['hang']} hangs "
        f"(slowest {outcomes['slowest ms']} ms, peak {outcomes['peak KiB']:,} KiB)"))


def convert_without_beam(folder: str) -> tuple[int, int]:
    """What `pipelines.tfrecord.run` does with a TFDS folder before and in its pipeline, here:
    `(records read, records refused as Malformed)`. Raises FeatureError as run() refuses."""
    info = tfds.read_json(os.path.join(folder, tfds.TFDS_INFO))
    split, files, count = tfds.split_files(folder, info, "train")
    features, decoders, described = tfds.tfds_features(folder, tfds.read_json(os.path.join(folder, tfds.TFDS_FEATURES)))
    metadata = {"pipeline": "tfrecord", "tfds": tfds.tfds_metadata(info, split, files, count, described)}
    check_metadata(metadata)
    assert json_depth({"features": features.to_dict(), "metadata": metadata}) <= MAX_DEPTH
    features.arrow_schema()
    parse = pipeline._ToExamplesFn(features, decoders)
    parse.setup()
    records = [item for path in files for item in tfrecord_io.open_records(path)]
    parsed = list(parse.process(records))
    return len(records), sum(isinstance(data, common.Malformed) for _, data in parsed)


@pytest.mark.timeout(300)
@settings(max_examples=200 * SCALE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_tfds_metadata_gives_a_conversion_or_a_feature_error(tfds_source, tfds_tally, data):
    name = data.draw(st.sampled_from([tfds.TFDS_INFO, tfds.TFDS_FEATURES]))
    case = pathlib.Path(tempfile.mkdtemp(dir=tfds_source.parent.parent)) / "toy" / "1.0.0"
    case.mkdir(parents=True)
    for source in tfds_source.iterdir():
        os.link(source, case / source.name)
    os.remove(case / name)
    (case / name).write_text(json.dumps(data.draw(mutated_json(json.loads((tfds_source / name).read_text())))))
    tfds_tally["cases"] += 1
    start = time.monotonic()
    (converted, error), peak = traced(lambda: attempt(lambda: convert_without_beam(str(case))))
    elapsed = time.monotonic() - start
    shutil.rmtree(case.parent.parent)
    if error is not None and not isinstance(error, FeatureError):
        tfds_tally["crash"] += 1
        raise error
    if error is not None:
        assert str(error) and "\n" not in str(error), error
        tfds_tally["refused"] += 1
    else:
        tfds_tally["accepted"] += 1
        tfds_tally["records malformed"] += bool(converted[1])
    tfds_tally["slowest ms"] = max(tfds_tally["slowest ms"], round(1000 * elapsed))
    tfds_tally["peak KiB"] = max(tfds_tally["peak KiB"], peak >> 10)
    tfds_tally["hang"] += elapsed > HANG_SECONDS
    assert elapsed <= HANG_SECONDS and peak < MEMORY_BOUND, (elapsed, peak)
