"""Hugging Face round trips: every HF feature type into a cache (`from_hf`), read back by
ShardedDataset, out again (`ShardedDataset.to_hf()`, HF's own arrow loader), and the
shard lists Polars, DuckDB and pyarrow.dataset read."""

from __future__ import annotations

import datetime
import decimal
import io
import wave

import datasets
import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads
import pytest
from datasets.table import InMemoryTable, table_cast

from beam_shards import (Array, FeatureError, Features, Sequence, ShardedDataset, Struct, Value, from_hf,
                         from_hf_features, read_metadata, shard_paths, to_hf_features, write_shards)

from _support import png

pytestmark = pytest.mark.timeout(120)
D = datasets


def _wav() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as handle:
        handle.setnchannels(1), handle.setsampwidth(2), handle.setframerate(16000)
        handle.writeframes(b"\x00\x01" * 50)
    return out.getvalue()


TURN = {"role": D.Value("string"), "content": D.Value("string")}
WHEN = datetime.datetime(2026, 11, 25, 12, 30)
# (name, HF feature, three values in HF's storage form): each is written, read and sent back.
CASES = [
    *[(dtype, D.Value(dtype), values) for dtype, values in [
        ("bool", [True, False, None]), ("int8", [-128, 127, None]), ("int16", [1, -2, 3]), ("int32", [1, 2, None]),
        ("int64", [2**62, -1, 0]), ("uint8", [0, 255, 1]), ("uint16", [1, 2, 3]), ("uint32", [2**32 - 1, 0, 1]),
        ("uint64", [2**64 - 1, 0, None]), ("float16", [0.5, -2.0, None]), ("float32", [1.5, float("inf"), 0.0]),
        ("float64", [1e300, -0.0, None]), ("string", ["ü", "", None]), ("large_string", ["a", "b", None]),
        ("binary", [b"\x00", b"", None]), ("large_binary", [b"x", b"y", None]),
        ("date32", [datetime.date(2026, 11, 25), None, datetime.date(1970, 1, 1)]),
        ("date64", [datetime.datetime(2026, 11, 25), None, datetime.datetime(1970, 1, 1)]),
        ("time32[s]", [datetime.time(12, 30), None, datetime.time(0)]),
        ("time64[us]", [datetime.time(12, 30, 1, 5), None, datetime.time(0)]),
        ("timestamp[ns]", [WHEN, None, WHEN]),
        ("timestamp[us, tz=UTC]", [WHEN.replace(tzinfo=datetime.timezone.utc), None, None]),
        ("duration[ms]", [datetime.timedelta(seconds=1.5), None, datetime.timedelta(0)]),
        ("decimal128(10, 2)", [decimal.Decimal("12.34"), None, decimal.Decimal("-1.00")]),
    ]],
    ("ClassLabel by names", D.ClassLabel(names=["cat", "dog"]), [0, 1, None]),
    ("ClassLabel by count", D.ClassLabel(num_classes=3), [2, 0, 1]),
    ("List of ints", D.List(D.Value("int32")), [[1, 2], [], None]),
    ("List of strings", D.List(D.Value("string")), [["a"], ["b", None], []]),
    ("lists of lists", D.List(D.List(D.Value("float32"))), [[[1.0], []], [], [[2.0, 3.0]]]),
    ("chat", D.List(TURN), [[{"role": "user", "content": "hi"}, {"role": "bot", "content": "yo"}], [], None]),
    ("dict of a value and a list", {"a": D.Value("int8"), "b": D.List(D.Value("string"))},
     [{"a": 1, "b": ["x"]}, {"a": None, "b": []}, None]),
    ("legacy Sequence of a dict", D.Sequence({"x": D.Value("int8")}), [{"x": [1, 2]}, {"x": []}, {"x": None}]),
    ("fixed-length List of floats", D.List(D.Value("float32"), length=3), [[1.0, 2.0, 3.0], None, [0.0] * 3]),
    ("Array2D", D.Array2D((2, 3), "float32"), [[[1.0] * 3, [2.0] * 3], [[0.0] * 3] * 2, None]),
    ("Array2D with a variable first dimension", D.Array2D((None, 3), "int16"),
     [[[1, 2, 3]], [[4, 5, 6], [7, 8, 9]], [[0, 0, 0]]]),  # HF cannot list a null or empty row of it
    ("Array3D", D.Array3D((1, 2, 2), "uint8"), [[[[1, 2], [3, 4]]], [[[0, 0], [0, 0]]], None]),
    ("Array4D", D.Array4D((1, 1, 2, 1), "float64"), [[[[[1.0], [2.0]]]], None, [[[[0.0], [0.0]]]]]),
    ("Array5D", D.Array5D((1, 1, 1, 1, 2), "int64"), [[[[[[1, 2]]]]], None, [[[[[3, 4]]]]]]),
    ("Image", D.Image(), [{"bytes": png(1), "path": None}, None, {"bytes": png(2), "path": None}]),
    ("Audio", D.Audio(sampling_rate=16000), [{"bytes": _wav(), "path": None}, None, None]),
]


# The cases stored as Hugging Face stores them: all but images and audio (HF keeps them in structs of bytes
# and path), ArrayND (HF's extension types), which the design leaves to to_hf(), and binary values, which
# keep 64-bit offsets here (the loader sees Value("large_binary")).
OWN_STORAGE = (D.Image, D.Audio, D.Array2D, D.Array3D, D.Array4D, D.Array5D)
SAME_STORAGE = {name for name, feature, _ in CASES if not isinstance(feature, OWN_STORAGE) and name != "binary"}


def hf_dataset(feature, values) -> datasets.Dataset:
    """A Dataset of one column `x`, built from HF's storage form (no encoding, so no decoder is needed)."""
    features = D.Features({"x": feature})
    table = pa.table({"x": pa.array(values, type=features.arrow_schema.field("x").type.storage_type
                                    if isinstance(features.arrow_schema.field("x").type, pa.ExtensionType)
                                    else features.arrow_schema.field("x").type)})
    return D.Dataset(InMemoryTable(table_cast(table, features.arrow_schema)), info=D.DatasetInfo(features=features))


def storage(dataset: datasets.Dataset) -> list:
    """The rows as HF stores them (no decoding: images and audio stay bytes)."""
    return dataset.with_format("arrow")[:].to_pylist()


@pytest.mark.parametrize("name, feature, values", CASES, ids=[case[0] for case in CASES])
def test_every_hf_feature_goes_out_and_comes_back_equal(tmp_path, name, feature, values):
    original = hf_dataset(feature, values)
    path = str(tmp_path / "cache")
    manifest = from_hf(original, path)
    assert manifest.num_rows == 3
    ours = ShardedDataset(path, image_mode="bytes")
    for row, value in zip(ours, storage(original)):
        _assert_same(row["x"], value["x"])
    back = ours.to_hf()
    assert back.features == original.features
    assert storage(back) == storage(original)
    # HF's own loader reads the shard files; cast to the features, the rows are the same (an ArrayND
    # it reads only in HF's own storage, nested lists, which to_hf() gives).
    loaded = datasets.load_dataset("arrow", data_files=shard_paths(path), split="train",
                                   cache_dir=str(tmp_path / "hf_cache"))
    assert len(loaded) == 3
    if not isinstance(feature, (D.Array2D, D.Array3D, D.Array4D, D.Array5D)):
        assert storage(loaded.cast(original.features)) == storage(original)
    # The shards carry the HF features: the loader takes them where the storage is HF's own.
    if name in SAME_STORAGE:
        assert loaded.features == original.features
        assert storage(loaded) == storage(original)


def _assert_same(ours, stored) -> None:
    """A value read by ShardedDataset against HF's storage of it."""
    if isinstance(ours, np.ndarray):
        assert np.array_equal(ours, np.asarray(stored, dtype=ours.dtype)), (ours, stored)
    elif isinstance(stored, dict) and set(stored) == {"bytes", "path"}:
        assert ours == stored["bytes"]
    else:
        assert ours == stored or (ours != ours and stored != stored), (ours, stored)  # NaN


def test_the_mapping_table_both_ways():
    ours = from_hf_features(D.Features({"m": D.List(TURN), "v": D.List(D.Value("float32"), length=4)}))
    assert ours == Features({"m": Sequence(Struct({"role": Value("string", nullable=True),
                                                  "content": Value("string", nullable=True)}, nullable=True),
                                           nullable=True),
                             "v": Array((4,), "float32", nullable=True)})
    assert to_hf_features(ours) == D.Features({"m": D.List(TURN), "v": D.List(D.Value("float32"), length=4)})
    # Stored alike here, so a LargeList comes back as a List; a variable 1-D Array goes out as a List.
    assert to_hf_features(from_hf_features(D.Features({"l": D.LargeList(D.Value("int8"))}))) == D.Features(
        {"l": D.List(D.Value("int8"))})
    assert to_hf_features(Features({"a": Array((None,), "int8")})) == D.Features({"a": D.List(D.Value("int8"))})


@pytest.mark.parametrize("feature, words", [
    (D.Translation(languages=["en", "fr"]), "column 't': Hugging Face Translation has no equal here"),
    (D.List(D.Value("string"), length=2), "column 't': a Hugging Face list of 2"),
    (D.Image(mode="RGB"), "column 't': Hugging Face Image with mode has no equal here"),
    (D.Value("null"), "column 't': Hugging Face Value('null') has no equal here"),
])
def test_a_feature_with_no_equal_is_refused_naming_its_column(feature, words):
    with pytest.raises(FeatureError, match=words.replace("(", r"\(").replace(")", r"\)")):
        from_hf_features(D.Features({"t": feature}))


def test_an_array_of_six_dimensions_has_no_hf_equal():
    with pytest.raises(FeatureError, match="column 'a': .*Array5D at most"):
        to_hf_features(Features({"a": Array((1,) * 6, "int8")}))


def test_a_dataset_dict_is_written_split_by_split(tmp_path):
    splits = D.DatasetDict({"train": D.Dataset.from_dict({"text": ["a", "b", "c"]}),
                            "test": D.Dataset.from_dict({"text": ["d"]})})
    manifests = from_hf(splits, str(tmp_path / "cache"), shard_size_bytes="1MB")
    assert {split: m.num_rows for split, m in manifests.items()} == {"train": 3, "test": 1}
    assert [row["text"] for row in ShardedDataset(str(tmp_path / "cache" / "test"))] == ["d"]


def test_a_shuffled_or_filtered_dataset_is_written_as_it_reads(tmp_path):
    dataset = D.Dataset.from_dict({"n": list(range(10))}).shuffle(seed=1).filter(lambda row: row["n"] % 2)
    from_hf(dataset, str(tmp_path / "cache"))
    assert [row["n"] for row in ShardedDataset(str(tmp_path / "cache"))] == dataset["n"]


def test_a_view_goes_to_hf_with_its_rows_and_columns(tmp_path):
    path = str(tmp_path / "cache")
    write_shards(({"n": i, "s": str(i)} for i in range(20)), path,
                 Features({"n": Value("int64"), "s": Value("string")}), shard_size_bytes=200, batch_size=3)
    view = ShardedDataset(path, columns=["n"])[5:15:3]
    assert view.to_hf()["n"] == [5, 8, 11, 14] and list(view.to_hf().features) == ["n"]
    assert ShardedDataset(path)[::-1].to_hf()["s"] == [str(i) for i in range(19, -1, -1)]


def test_polars_duckdb_and_pyarrow_dataset_count_one_version(tmp_path):
    path = str(tmp_path / "cache")
    features = Features({"n": Value("int64")})
    write_shards(({"n": i} for i in range(100)), path, features, shard_size_bytes=400)
    write_shards(({"n": i} for i in range(50)), path, features, shard_size_bytes=400, mode="append")
    write_shards(({"n": i} for i in range(7)), path, features, shard_size_bytes=400)
    paths = shard_paths(path)
    assert pl.scan_ipc(paths).select(pl.len()).collect().item() == 7
    dataset = pads.dataset(paths, format="arrow")
    assert dataset.count_rows() == 7
    assert duckdb.sql("SELECT count(*) FROM dataset").fetchall() == [(7,)]
    assert pads.dataset(shard_paths(path, version=2), format="arrow").count_rows() == 150
    assert read_metadata(path).num_rows == 7
    everything = pads.dataset(str(tmp_path / "cache"), format="arrow", exclude_invalid_files=True)
    assert everything.count_rows() > 7, "a glob of the folder finds older versions' shards too"


def test_a_save_to_disk_folder_converts_with_no_flags(tmp_path):
    from pipelines import parquet

    features = D.Features({"image": D.Image(), "label": D.ClassLabel(names=["ant", "bee"]), "messages": D.List(TURN),
                           "grid": D.Array2D((2, 2), "uint8")})
    table = pa.table({"image": pa.array([{"bytes": png(i), "path": None} for i in range(5)],
                                        features.arrow_schema.field("image").type),
                      "label": pa.array([i % 2 for i in range(5)], pa.int64()),
                      "messages": pa.array([[{"role": "user", "content": str(i)}] for i in range(5)],
                                           features.arrow_schema.field("messages").type),
                      "grid": pa.array([[[i, 0], [0, i]] for i in range(5)], pa.list_(pa.list_(pa.uint8())))})
    original = D.Dataset(InMemoryTable(table_cast(table, features.arrow_schema)), info=D.DatasetInfo(features=features))
    original.save_to_disk(str(tmp_path / "saved"), max_shard_size="2KB")
    assert len(list((tmp_path / "saved").glob("*.arrow"))) > 1
    manifest = parquet.run(["--input", str(tmp_path / "saved"), "--output", str(tmp_path / "cache"), "--batch_size", "2"])
    assert manifest.features == from_hf_features(features)
    ours = ShardedDataset(str(tmp_path / "cache"), image_mode="bytes")
    assert [row["label"] for row in ours] == [0, 1, 0, 1, 0]
    assert ours[3]["messages"] == [{"role": "user", "content": "3"}] and ours[3]["image"] == png(3)
    assert np.array_equal(ours[4]["grid"], [[4, 0], [0, 4]])
    assert storage(ours.to_hf()) == storage(original)


def test_a_dataset_dict_folder_names_its_splits(tmp_path, capsys):
    from pipelines import parquet

    D.DatasetDict({"train": D.Dataset.from_dict({"n": [1]}), "test": D.Dataset.from_dict({"n": [2]})}).save_to_disk(
        str(tmp_path / "saved"))
    with pytest.raises(SystemExit) as exit_:
        parquet.run(["--input", str(tmp_path / "saved"), "--output", str(tmp_path / "cache")])
    assert exit_.value.code == 2
    assert "a DatasetDict folder (splits train, test): give one split's folder, like " in capsys.readouterr().err


def test_the_parquet_pipeline_takes_a_label_column(tmp_path):
    import pyarrow.parquet as pq

    from pipelines import parquet

    for part in range(2):
        pq.write_table(pa.table({"text": [f"t{part}{i}" for i in range(3)],
                                 "kind": [["cow", "ant", "bee"][(part + i) % 3] for i in range(3)]}),
                       tmp_path / f"part-{part}.parquet")
    manifest = parquet.run(["--input", str(tmp_path / "part-*.parquet"), "--output", str(tmp_path / "cache"),
                            "--label_column", "kind"])
    assert manifest.features["kind"].names == ["ant", "bee", "cow"]
    assert [row["kind"] for row in ShardedDataset(str(tmp_path / "cache"))] == [2, 0, 1, 0, 1, 2]
