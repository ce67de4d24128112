"""Features: dtypes, encoding rules, safe casts, JSON round trip, fingerprint, errors."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from beam_shards import (Array, ClassLabel, EncodeError, FeatureError, Features, Image, Sequence, Value, Video,
                         encode_example)
from beam_shards.features import SCHEMA_METADATA_KEY, VALUE_DTYPES
from beam_shards.features.decode import decode_table

from _paths import DATA
from _support import jpeg, png


def roundtrip(features: Features, examples: list[dict], image_mode: str = "bytes") -> list[dict]:
    """Encodes `examples`, builds one record batch and decodes it back."""
    rows = [encode_example(e, features, key=i) for i, e in enumerate(examples)]
    batch = features.build_batch(rows)
    assert batch.schema.equals(features.arrow_schema())
    return decode_table(batch, features, image_mode)


def encode_error(features: Features, example: dict, key: object = "ex-1") -> EncodeError:
    with pytest.raises(EncodeError) as info:
        encode_example(example, features, key=key)
    return info.value


# ---- Value -------------------------------------------------------------------------------

INT_LIMITS = {name: (int(np.iinfo(name).min), int(np.iinfo(name).max))
              for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")}


@pytest.mark.parametrize("dtype", sorted(INT_LIMITS))
def test_value_int_accepts_its_range_and_rejects_beyond(dtype):
    low, high = INT_LIMITS[dtype]
    features = Features({"v": Value(dtype)})
    assert [r["v"] for r in roundtrip(features, [{"v": low}, {"v": high}, {"v": np.int8(3)}])] == [low, high, 3]
    assert features.arrow_schema().field("v").type == pa.from_numpy_dtype(np.dtype(dtype))
    for bad in (low - 1, high + 1):
        error = encode_error(features, {"v": bad})
        assert error.field == "v" and str(bad) in str(error) and dtype in str(error)


@pytest.mark.parametrize("bad", [True, np.bool_(False), 1.0, float("nan"), "3", None, b"\x01"])
def test_value_int_rejects_non_ints(bad):
    error = encode_error(Features({"v": Value("int32")}), {"v": bad})
    assert error.field == "v" and "Value('int32')" in str(error)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_value_float_round_trip_and_arrow_type(dtype):
    features = Features({"v": Value(dtype)})
    values = [0.5, -2, np.float32(1.25), np.int16(7), float("inf"), float("nan")]
    decoded = [r["v"] for r in roundtrip(features, [{"v": v} for v in values])]
    assert decoded[:5] == [0.5, -2.0, 1.25, 7.0, float("inf")]
    assert np.isnan(decoded[5])
    assert features.arrow_schema().field("v").type == pa.from_numpy_dtype(np.dtype(dtype))


def test_value_float_narrowing_rounds_but_never_overflows_or_changes_an_int():
    assert roundtrip(Features({"v": Value("float32")}), [{"v": 0.1}])[0]["v"] == pytest.approx(0.1, rel=1e-6)
    error = encode_error(Features({"v": Value("float16")}), {"v": 1e10})
    assert "float16" in str(error) and error.field == "v"
    error = encode_error(Features({"v": Value("float32")}), {"v": 2 ** 24 + 1})
    assert str(2 ** 24 + 1) in str(error)
    error = encode_error(Features({"v": Value("float64")}), {"v": 10 ** 400})
    assert error.field == "v"


@pytest.mark.parametrize("bad", [True, "1.5", None, [1.0]])
def test_value_float_rejects_non_numbers(bad):
    assert encode_error(Features({"v": Value("float32")}), {"v": bad}).field == "v"


def test_value_bool_string_binary():
    features = Features({"b": Value("bool"), "s": Value("string"), "x": Value("binary")})
    examples = [{"b": True, "s": "héllo ✓", "x": b"\x00\xff"},
                {"b": np.bool_(False), "s": "caf\xc3\xa9".encode("latin-1"), "x": bytearray(b"ab")},
                {"b": False, "s": "", "x": memoryview(b"")}]
    assert roundtrip(features, examples) == [
        {"b": True, "s": "héllo ✓", "x": b"\x00\xff"},
        {"b": False, "s": "café", "x": b"ab"},
        {"b": False, "s": "", "x": b""},
    ]
    schema = features.arrow_schema()
    assert schema.field("s").type == pa.large_string()
    assert schema.field("x").type == pa.large_binary()


@pytest.mark.parametrize("dtype, bad, reason", [
    ("bool", 1, "expected a bool"),
    ("string", 5, "expected a str"),
    ("string", b"\xff\xfe", "not valid UTF-8"),
    ("string", "\ud800", "UTF-8"),
    ("binary", "text", "expected bytes"),
])
def test_value_rejects_wrong_types(dtype, bad, reason):
    error = encode_error(Features({"v": Value(dtype)}), {"v": bad})
    assert reason in str(error) and error.field == "v"


def test_every_value_dtype_is_covered_and_unknown_dtype_rejected():
    assert set(VALUE_DTYPES) == set(INT_LIMITS) | {"float16", "float32", "float64", "bool", "string", "binary"}
    with pytest.raises(FeatureError, match="'int128'"):
        Value("int128")


def test_nullable_value_takes_none_and_required_value_does_not():
    features = Features({"a": Value("int64", nullable=True), "s": Value("string", nullable=True)})
    assert roundtrip(features, [{"a": None, "s": None}, {"a": 3, "s": "x"}]) == [
        {"a": None, "s": None}, {"a": 3, "s": "x"}]
    error = encode_error(Features({"a": Value("int64")}), {"a": None})
    assert "nullable" in str(error) and error.field == "a"


# ---- ClassLabel --------------------------------------------------------------------------

def test_class_label_names_and_num_classes():
    named = ClassLabel(names=["cat", "dog", "bird"])
    assert named.num_classes == 3
    assert named.str2int("dog") == 1 and named.int2str(2) == "bird"
    counted = ClassLabel(num_classes=4)
    assert counted.names is None and counted.int2str(3) == "3"
    features = Features({"a": named, "b": counted})
    rows = roundtrip(features, [{"a": "bird", "b": 0}, {"a": np.int64(0), "b": np.uint8(3)}])
    assert rows == [{"a": 2, "b": 0}, {"a": 0, "b": 3}]
    assert all(type(r["a"]) is int for r in rows)
    assert features.arrow_schema().field("a").type == pa.int64()


@pytest.mark.parametrize("feature, bad, reason", [
    (ClassLabel(names=["a", "b"]), 2, "out of range 0..1"),
    (ClassLabel(names=["a", "b"]), -1, "out of range 0..1"),
    (ClassLabel(names=["a", "b"]), "c", "unknown class name"),
    (ClassLabel(num_classes=3), "a", "class names are not declared"),
    (ClassLabel(num_classes=3), True, "expected a class id"),
    (ClassLabel(num_classes=3), 1.0, "expected a class id"),
])
def test_class_label_rejects(feature, bad, reason):
    error = encode_error(Features({"y": feature}), {"y": bad})
    assert reason in str(error) and repr(feature) in str(error)


def test_class_label_lookups_and_declaration_errors():
    label = ClassLabel(names=["a", "b"])
    with pytest.raises(ValueError, match="'z'"):
        label.str2int("z")
    with pytest.raises(ValueError, match="class id 2 out of range 0..1"):
        label.int2str(2)
    with pytest.raises(ValueError, match="-1"):
        label.int2str(-1)
    with pytest.raises(FeatureError, match="exactly one"):
        ClassLabel()
    with pytest.raises(FeatureError, match="exactly one"):
        ClassLabel(names=["a"], num_classes=1)
    with pytest.raises(FeatureError, match="unique"):
        ClassLabel(names=["a", "a"])
    with pytest.raises(FeatureError, match="at least one"):
        ClassLabel(num_classes=0)


# ---- Array -------------------------------------------------------------------------------

NUMERIC_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                  "float16", "float32", "float64"]


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_array_fixed_shape_round_trips_every_dtype(dtype):
    features = Features({"a": Array((2, 3), dtype)})
    values = [np.arange(6).reshape(2, 3).astype(dtype), (np.arange(6).reshape(2, 3) % 2).astype(dtype)]
    decoded = [r["a"] for r in roundtrip(features, [{"a": v} for v in values])]
    for got, want in zip(decoded, values):
        assert got.shape == (2, 3) and got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want)
    assert features.arrow_schema().field("a").type == pa.list_(pa.from_numpy_dtype(np.dtype(dtype)), 6)


def test_array_exact_arrays_copied_others_made_contiguous_native_and_exact():
    feature = Array((2, 3), "float32")
    exact = np.arange(6, dtype=np.float32).reshape(2, 3)
    kept = feature.encode(exact, "a")  # a copy: the caller may refill its array before the batch is built
    np.testing.assert_array_equal(kept, exact)
    assert kept.dtype == exact.dtype and not np.may_share_memory(kept, exact)
    strided = np.arange(6, dtype=np.float32).reshape(3, 2).T
    big_endian = exact.astype(">f4")
    for value in (strided, big_endian, exact.astype(np.float64), exact.tolist()):
        got = feature.encode(value, "a")
        assert got.flags.c_contiguous and got.dtype == np.dtype("float32") and got.dtype.isnative
        np.testing.assert_array_equal(got, np.asarray(value, dtype=np.float32))


@pytest.mark.parametrize("shape, lengths", [((None,), [3, 0, 1]), ((None, 2), [2, 0, 5]), ((None, 2, 2), [1, 3])])
def test_array_variable_first_dimension(shape, lengths):
    features = Features({"a": Array(shape, "int32")})
    inner = shape[1:]
    values = [np.arange(n * int(np.prod(inner, dtype=int)), dtype=np.int32).reshape((n,) + inner) + n for n in lengths]
    decoded = [r["a"] for r in roundtrip(features, [{"a": v} for v in values])]
    for got, want in zip(decoded, values):
        assert got.shape == want.shape and got.dtype == np.int32
        np.testing.assert_array_equal(got, want)
    assert pa.types.is_large_list(features.arrow_schema().field("a").type)


def test_array_accepts_nested_lists_and_safe_casts():
    features = Features({"i8": Array((3,), "int8"), "f": Array((2,), "float32"), "u": Array((2,), "uint8"),
                         "b": Array((2,), "int16")})
    row = encode_example({"i8": [-128, 0, 127], "f": [1, 2.5], "u": np.array([0, 255], dtype=np.int64),
                          "b": [True, False]}, features)
    assert row["i8"].dtype == np.int8 and row["i8"].tolist() == [-128, 0, 127]
    assert row["f"].dtype == np.float32 and row["f"].tolist() == [1.0, 2.5]
    assert row["u"].dtype == np.uint8 and row["b"].tolist() == [1, 0]


@pytest.mark.parametrize("feature, value, reason", [
    (Array((2,), "int8"), np.array([1, 200], dtype=np.int64), "do not fit int8"),
    (Array((2,), "int8"), [-129, 0], "do not fit int8"),
    (Array((2,), "uint8"), [-1, 3], "do not fit uint8"),
    (Array((2,), "int64"), [1.0, 2.0], "cannot cast float64 to int64"),
    (Array((2,), "int32"), np.array([1.5, 2], dtype=np.float32), "cannot cast float32"),
    (Array((2,), "bool"), [0, 1], "cannot cast int64 to bool"),
    (Array((2,), "float32"), ["a", "b"], "cannot cast"),
    (Array((2,), "float16"), [1e6, 0.0], "float16"),
    (Array((1,), "float32"), [2 ** 24 + 1], str(2 ** 24 + 1)),
    (Array((2,), "float32"), [[1, 2], [3]], "ragged"),
    (Array((2, 3), "float32"), np.zeros(6), "wrong shape (6,), expected (2, 3)"),
    (Array((2, 3), "float32"), np.zeros((3, 2)), "wrong shape (3, 2)"),
    (Array((None, 3), "float32"), np.zeros((4, 2)), "wrong shape (4, 2), expected (None, 3)"),
    (Array((None,), "float32"), 1.0, "wrong shape ()"),
])
def test_array_rejects_unsafe_casts_and_wrong_shapes(feature, value, reason):
    error = encode_error(Features({"arr": feature}), {"arr": value}, key=7)
    assert reason in str(error), str(error)
    assert error.example == 7 and error.field == "arr" and error.feature == repr(feature)


@pytest.mark.parametrize("shape, dtype", [((), "float32"), ((0,), "float32"), ((3, None), "float32"),
                                          ((2.0,), "float32"), ((2,), "string"), ((2,), "complex64")])
def test_array_declaration_errors(shape, dtype):
    with pytest.raises(FeatureError):
        Array(shape, dtype)


def test_nullable_array_fixed_and_variable():
    features = Features({"f": Array((2,), "float32", nullable=True), "v": Array((None, 2), "int16", nullable=True)})
    rows = roundtrip(features, [{"f": None, "v": [[1, 2]]}, {"f": [1, 2], "v": None}])
    assert rows[0]["f"] is None and rows[1]["v"] is None
    assert rows[1]["f"].tolist() == [1.0, 2.0] and rows[0]["v"].tolist() == [[1, 2]]


# ---- Sequence ----------------------------------------------------------------------------

def test_sequences_of_every_kind_round_trip():
    features = Features({
        "ints": Sequence(Value("int64")),
        "texts": Sequence(Value("string")),
        "labels": Sequence(ClassLabel(names=["a", "b"])),
        "images": Sequence(Image()),
        "arrays": Sequence(Array((2,), "float32")),
        "ragged": Sequence(Array((None,), "int8")),
        "nested": Sequence(Sequence(Value("int32"))),
        "videos": Sequence(Video()),
    })
    pictures = [jpeg(1), png(2)]
    examples = [
        {"ints": [1, 2, 3], "texts": ["x"], "labels": ["b", 0], "images": pictures, "arrays": [[1, 2], [3, 4]],
         "ragged": [[1], [], [2, 3]], "nested": [[1], [], [2, 3]], "videos": [b"v1"]},
        {"ints": [], "texts": [], "labels": [], "images": [], "arrays": [], "ragged": [], "nested": [],
         "videos": []},
        {"ints": np.array([4, 5]), "texts": ("y", "z"), "labels": [1], "images": [None], "arrays": [[5, 6]],
         "ragged": [[]], "nested": [[]], "videos": [None]},
    ]
    rows = roundtrip(features, examples)
    assert rows[0]["ints"] == [1, 2, 3] and rows[0]["labels"] == [1, 0] and rows[0]["images"] == pictures
    assert [a.tolist() for a in rows[0]["arrays"]] == [[1.0, 2.0], [3.0, 4.0]]
    assert [a.tolist() for a in rows[0]["ragged"]] == [[1], [], [2, 3]]
    assert rows[0]["nested"] == [[1], [], [2, 3]] and rows[0]["videos"] == [b"v1"]
    assert all(value == [] for value in rows[1].values())
    assert rows[2]["ints"] == [4, 5] and rows[2]["texts"] == ["y", "z"] and rows[2]["images"] == [None]
    assert rows[2]["nested"] == [[]] and rows[2]["videos"] == [None]
    assert features.arrow_schema().field("images").type == pa.large_list(pa.field("item", pa.large_binary()))


def test_sequence_errors_name_the_position():
    features = Features({"m": Sequence(Sequence(Value("int8")))})
    error = encode_error(features, {"m": [[1], [2, 300]]})
    assert error.field == "m[1][1]" and error.feature == "Value('int8')" and "300" in str(error)
    error = encode_error(Features({"frames": Sequence(Image())}), {"frames": [jpeg(0), jpeg(1), b"junk"]})
    assert error.field == "frames[2]"
    error = encode_error(Features({"t": Sequence(Value("string"))}), {"t": ["a", None]})
    assert error.field == "t[1]" and "nullable" in str(error)


@pytest.mark.parametrize("bad", ["abc", b"abc", {"a": 1}, 5, None])
def test_sequence_rejects_non_lists(bad):
    error = encode_error(Features({"s": Sequence(Value("string"))}), {"s": bad})
    assert error.field == "s"


def test_nullable_sequence_takes_none():
    features = Features({"s": Sequence(Value("int64"), nullable=True)})
    assert roundtrip(features, [{"s": None}, {"s": [1]}]) == [{"s": None}, {"s": [1]}]
    with pytest.raises(FeatureError, match="Sequence takes a feature"):
        Sequence("int64")


# ---- Video -------------------------------------------------------------------------------

def test_video_bytes_path_and_none(tmp_path):
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\x00\x00\x00\x18ftypmp42 video bytes")
    features = Features({"v": Video()})
    rows = roundtrip(features, [{"v": b"raw"}, {"v": str(clip)}, {"v": clip}, {"v": clip.as_uri()}, {"v": None}])
    assert [r["v"] for r in rows] == [b"raw", clip.read_bytes(), clip.read_bytes(), clip.read_bytes(), None]
    assert features.arrow_schema().field("v").type == pa.large_binary()


@pytest.mark.parametrize("bad, reason", [(b"", "empty video"), (3, "expected video bytes or a path"),
                                         ("/no/such/clip.mp4", "/no/such/clip.mp4")])
def test_video_rejects(bad, reason):
    error = encode_error(Features({"v": Video()}), {"v": bad})
    assert reason in str(error) and error.field == "v"
    assert "nullable" in str(encode_error(Features({"v": Video(nullable=False)}), {"v": None}))


# ---- decode: each kind turns its Arrow column back into values ---------------------------

EVERY_KIND = [Value("int8", nullable=True), Value("string", nullable=True), Value("binary", nullable=True),
              ClassLabel(names=["a", "b"], nullable=True), Image(), Video(), Array((2, 3), "uint8", nullable=True),
              Array((None, 2), "float32", nullable=True), Sequence(Value("int64"), nullable=True),
              Sequence(Array((None, 2), "int16", nullable=True), nullable=True), Sequence(Sequence(Image()))]


@pytest.mark.parametrize("feature", EVERY_KIND, ids=repr)
def test_every_kind_decodes_an_empty_column_and_an_all_null_column(feature):
    assert feature.decode(feature.build_array([])) == []
    assert feature.decode(feature.build_array([None, None]), "numpy") == [None, None]


def test_scalar_and_file_kinds_decode_to_python_values_with_nulls_kept():
    column = [b"\x00\x01", None]
    assert Value("int8", nullable=True).decode(pa.array([-3, None], pa.int8())) == [-3, None]
    assert Value("string", nullable=True).decode(pa.array(["é", None], pa.large_string())) == ["é", None]
    assert Value("binary", nullable=True).decode(pa.array(column, pa.large_binary())) == column
    assert ClassLabel(names=["a", "b"], nullable=True).decode(pa.array([1, None], pa.int64())) == [1, None]
    assert Video().decode(pa.array(column, pa.large_binary()), "pil") == column


def test_image_decode_follows_the_image_mode():
    column = Image().build_array([png(1), None])
    pil, missing = Image().decode(column)
    assert pil.size == (16, 16) and missing is None
    assert Image().decode(column, "numpy")[0].shape == (16, 16, 3)
    assert Image().decode(column, "bytes") == [png(1), None]


def test_array_decode_gives_arrays_of_the_declared_shape_and_none_for_nulls():
    fixed = Array((2, 3), "uint8", nullable=True)
    grid = np.arange(6, dtype=np.uint8).reshape(2, 3)
    first, missing, last = fixed.decode(fixed.build_array([grid, None, grid + 1]))
    assert missing is None and first.dtype == np.uint8
    np.testing.assert_array_equal(first, grid)
    np.testing.assert_array_equal(last, grid + 1)
    ragged = Array((None, 2), "float32", nullable=True)
    boxes = [np.ones((3, 2), np.float32), None, np.zeros((0, 2), np.float32)]
    decoded = ragged.decode(ragged.build_array(boxes))
    assert [None if r is None else r.shape for r in decoded] == [(3, 2), None, (0, 2)]


@pytest.mark.parametrize("feature, rows", [
    (Array((2, 3), "uint8", nullable=True), [np.full((2, 3), k, np.uint8) for k in range(6)]),
    (Array((3,), "bool", nullable=True), [np.array([k % 2 == 0, True, k % 3 == 0]) for k in range(6)]),
    (Array((None, 2), "float32", nullable=True), [np.full((k, 2), k, np.float32) for k in range(6)]),
])
def test_row_reader_agrees_with_decode_on_a_sliced_column_with_nulls(feature, rows):
    values = [None if k in (1, 4) else row for k, row in enumerate(rows)]
    column = feature.build_array(values).slice(1, 4)  # offset 1: rows 1..4, two of them null
    read = feature.row_reader(column)
    for k, decoded in enumerate(feature.decode(column)):
        if decoded is None:
            assert read(k) is None
        else:
            np.testing.assert_array_equal(read(k), decoded)
            np.testing.assert_array_equal(decoded, values[k + 1])


def test_sequence_of_arrays_decodes_nested_nulls_and_empty_lists():
    feature = Sequence(Array((None, 2), "int16", nullable=True), nullable=True)
    value = [np.arange(4, dtype=np.int16).reshape(2, 2), None, np.zeros((0, 2), np.int16)]
    rows = feature.decode(feature.build_array([value, None, []]))
    assert rows[1] is None and rows[2] == []
    first, missing, empty = rows[0]
    np.testing.assert_array_equal(first, value[0])
    assert missing is None and empty.shape == (0, 2)


def test_sequence_decodes_a_slice_of_a_column():
    feature = Sequence(Sequence(Value("int64")))
    column = feature.build_array([[[1], [2, 3]], [], [[4, 5, 6]], [[7]]])
    assert feature.decode(column.slice(1, 2)) == [[], [[4, 5, 6]]]


# ---- describe: a short form of a value for people ---------------------------------------

def test_each_kind_describes_a_value_briefly():
    assert Value("binary").describe(b"\x00" * 1234) == "1,234 bytes"
    assert Value("int64").describe(None) == "None"
    assert Value("string").describe("y" * 100, limit=10) == "'yyyyyy..."
    assert ClassLabel(names=["cat", "dog"]).describe(1) == "1 (dog)"
    assert ClassLabel(num_classes=2).describe(7) == "7 (out of range)"
    assert Array((2, 2), "uint8").describe(np.eye(2, dtype=np.uint8)) == "uint8[2, 2] [[1, 0], [0, 1]]"
    long = np.arange(100, dtype=np.float32)
    assert Array((None,), "float32").describe(long) == "float32[100] [ 0., 1., 2., ..., 97., 98., 99.]"
    assert Video().describe(b"\x00" * 2500) == "video, 2.5 kB"
    assert Image().describe(png(1)).startswith("PNG 16x16 RGB, ")
    assert Sequence(ClassLabel(names=["a", "b"])).describe([0, None, 1]) == "[0 (a), None, 1 (b)]"


# ---- map_paths: the file paths a value names ---------------------------------------------

def test_map_paths_changes_only_the_paths_of_images_and_videos():
    up = str.upper
    assert Image().map_paths("a.jpg", up) == "A.JPG"
    assert Video().map_paths({"path": "v.mp4"}, up) == {"path": "V.MP4"}
    assert Image().map_paths({"bytes": b"x", "path": "a.jpg"}, up) == {"bytes": b"x", "path": "a.jpg"}
    assert Image().map_paths(b"a.jpg", up) == b"a.jpg"
    assert Sequence(Sequence(Image())).map_paths([["a.jpg", None], []], up) == [["A.JPG", None], []]
    assert Value("string").map_paths("a.jpg", up) == "a.jpg"
    assert Sequence(Value("string")).map_paths(["a.jpg"], up) == ["a.jpg"]


# ---- Features: schema, JSON, fingerprint -------------------------------------------------

ALL_KINDS = Features({
    "id": Value("int64"),
    "score": Value("float16", nullable=True),
    "image": Image(),
    "strict_image": Image(nullable=False),
    "label": ClassLabel(names=["cät", "dog"]),
    "count": ClassLabel(num_classes=7, nullable=True),
    "embedding": Array((4,), "float32"),
    "boxes": Array((None, 4), "int16", nullable=True),
    "frames": Sequence(Image()),
    "nested": Sequence(Sequence(Array((2, 2), "uint8"))),
    "video": Video(),
    "raw": Value("binary"),
})


def test_to_dict_from_dict_round_trips_through_json():
    text = json.dumps(ALL_KINDS.to_dict())
    back = Features.from_dict(json.loads(text))
    assert back == ALL_KINDS and back.to_dict() == ALL_KINDS.to_dict()
    assert list(back) == list(ALL_KINDS)
    assert back.arrow_schema().equals(ALL_KINDS.arrow_schema(), check_metadata=True)
    assert Features.from_json(ALL_KINDS.to_json()) == ALL_KINDS
    assert pickle.loads(pickle.dumps(ALL_KINDS)) == ALL_KINDS
    assert repr(back) == repr(ALL_KINDS)


def test_arrow_schema_types_nullability_and_metadata():
    schema = ALL_KINDS.arrow_schema()
    assert schema.names == list(ALL_KINDS)
    for name in ("image", "strict_image", "video", "raw"):
        assert schema.field(name).type == pa.large_binary()
    assert schema.field("image").nullable and not schema.field("strict_image").nullable
    assert not schema.field("id").nullable and schema.field("score").nullable
    assert Features.from_json(schema.metadata[SCHEMA_METADATA_KEY].decode()) == ALL_KINDS


@pytest.mark.parametrize("spec", [
    {"x": {"_type": "Nope"}},
    {"x": {"dtype": "int64"}},
    {"x": {"_type": "Value"}},
    {"x": {"_type": "Value", "dtype": "int64", "extra": 1}},
    {"x": {"_type": "Array", "shape": [0], "dtype": "float32"}},
    {"x": {"_type": "Sequence", "feature": {"_type": "Value", "dtype": "bad"}}},
    {"x": "int64"},
    [1, 2],
])
def test_from_dict_rejects_bad_specs(spec):
    with pytest.raises(FeatureError):
        Features.from_dict(spec)


def test_features_declaration_errors():
    with pytest.raises(FeatureError, match="non-empty strings"):
        Features({"": Value("int64")})
    with pytest.raises(FeatureError, match="must be a Feature"):
        Features({"x": "int64"})


_FINGERPRINT_SCRIPT = """
import json, sys
from beam_shards import Features
print(Features.from_dict(json.loads(sys.stdin.read())).fingerprint())
"""


def test_fingerprint_is_identical_in_another_process_with_another_hash_seed():
    fingerprint = ALL_KINDS.fingerprint()
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", _FINGERPRINT_SCRIPT], input=json.dumps(ALL_KINDS.to_dict()),
                             capture_output=True, text=True, env=env, check=True)
        assert out.stdout.strip() == fingerprint
    assert len(fingerprint) == 64 and int(fingerprint, 16) >= 0


def test_a_saved_cache_keeps_its_features_and_fingerprint():
    path = os.path.join(DATA, "format1_cache", "_metadata.json")
    with open(path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    features = Features.from_dict(manifest["features"])
    assert features.to_dict() == manifest["features"]
    assert features.fingerprint() == manifest["schema_fingerprint"]


@pytest.mark.parametrize("changed", [
    Features({"a": Value("int32"), "b": Image()}),
    Features({"a": Value("int64", nullable=True), "b": Image()}),
    Features({"b": Image(), "a": Value("int64")}),
    Features({"a2": Value("int64"), "b": Image()}),
    Features({"a": Value("int64"), "b": Image(nullable=False)}),
    Features({"a": Value("int64"), "b": Video()}),
    Features({"a": Value("int64"), "b": Image(), "c": Value("string")}),
])
def test_fingerprint_and_equality_change_when_features_change(changed):
    base = Features({"a": Value("int64"), "b": Image()})
    assert base.fingerprint() == Features({"a": Value("int64"), "b": Image()}).fingerprint()
    assert changed.fingerprint() != base.fingerprint()
    assert changed != base


def test_equal_features_hash_equal():
    a = Features({"x": ClassLabel(names=["p", "q"]), "y": Array((None, 2), "uint8")})
    b = Features.from_dict(a.to_dict())
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert ClassLabel(names=["p", "q"]) != ClassLabel(names=["q", "p"])
    assert Array((2,), "int8") == Array([2], "int8") and hash(Array((2,), "int8")) == hash(Array([2], "int8"))


# ---- encode_example errors ---------------------------------------------------------------

def test_error_for_a_missing_field_names_it_and_its_feature():
    features = Features({"a": Value("int64"), "b": Image()})
    error = encode_error(features, {"a": 1}, key="img-3")
    assert error.example == "img-3" and error.field == "b" and error.feature == "Image()"
    assert "missing field" in str(error) and "'img-3'" in str(error)


def test_error_for_an_unknown_field_names_it():
    error = encode_error(Features({"a": Value("int64")}), {"a": 1, "zz": 2, "yy": 3}, key=11)
    assert error.example == 11 and error.field == "zz"
    assert "'zz'" in str(error) and "'yy'" in str(error) and "example 11" in str(error)


def test_error_for_a_non_mapping_example():
    error = encode_error(Features({"a": Value("int64")}), [1, 2], key=0)
    assert error.example == 0 and "list" in str(error) and "example 0" in str(error)


def test_wrong_type_error_names_key_field_feature_and_what_it_got():
    features = Features({"emb": Array((4,), "float32")})
    error = encode_error(features, {"emb": np.zeros((3,), dtype=np.float64)}, key="row-9")
    text = str(error)
    for part in ("'row-9'", "'emb'", "Array((4,), 'float32')", "shape (3,)", "float64"):
        assert part in text, text
    assert error.got == "ndarray of shape (3,) and dtype float64"
    big = encode_error(Features({"t": Value("string")}), {"t": 12345}, key=2)
    assert big.got == "int 12345" and "example 2" in str(big)


def test_encode_error_pickles_with_its_fields():
    error = encode_error(Features({"x": Value("int8")}), {"x": 1000}, key=("shard", 3))
    back = pickle.loads(pickle.dumps(error))
    assert (back.example, back.field, back.feature, back.got, str(back)) == (
        error.example, error.field, error.feature, error.got, str(error))


@pytest.mark.parametrize("feature, value, field", [
    (Value("int16"), 40_000, "x"),
    (Value("string"), 3.5, "x"),
    (Value("binary"), "text", "x"),
    (Value("bool"), "yes", "x"),
    (ClassLabel(num_classes=3), 3, "x"),
    (Image(), b"not an image", "x"),
    (Video(), 42, "x"),
    (Array((3,), "int8"), [1, 2], "x"),
    (Sequence(Value("int64")), "abc", "x"),
    (Sequence(ClassLabel(names=["a"])), ["a", "b"], "x[1]"),
])
def test_every_encode_error_names_example_field_feature_and_value(feature, value, field):
    error = encode_error(Features({"x": feature}), {"x": value}, key="sample-42")
    inner = feature.feature if isinstance(feature, Sequence) and field != "x" else feature
    assert (error.example, error.field, error.feature) == ("sample-42", field, repr(inner))
    assert error.got and error.reason
    text = str(error)
    for part in ("example 'sample-42'", f"field {field!r}", repr(inner), f"got {error.got}"):
        assert part in text, text
