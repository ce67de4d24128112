"""Stable labels: --classes, --classes_from and appends keep class ids the same across splits and versions."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tfrecord as tfrecord_package

from beam_shards import ClassLabel, FeatureError, Features, ShardedDataset, Value, read_metadata, write_shards
from beam_shards.format.layout import MANIFEST_NAME
from beam_shards.versions.bad_inputs import read_bad_inputs
from pipelines import common, image_folder, parquet, tfrecord
from pipelines.classes import classes_of_cache, parse_classes

from _support import png

DIGITS = [f"digit_{i}" for i in range(4)]
RUNNER = "--runner=FnApiRunner"


def image_split(root, classes: list[str], per_class: int = 2):
    """An image folder (real PNGs) with `per_class` images in a folder per class."""
    for number, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            (root / name / f"{i}.png").write_bytes(png(10 * number + i))
    return root


def labels_by_path(path: str) -> dict[str, int]:
    return {row["path"]: row["label"] for row in ShardedDataset(path, image_mode="bytes")}


def convert(root, out, *flags: str):
    return image_folder.run(["--input", str(root), "--output", str(out), RUNNER, *flags])


def usage_error(capsys, run, *args) -> str:
    with pytest.raises(SystemExit) as exit_:
        run(*args)
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.timeout(300)
def test_a_val_split_lacking_classes_keeps_the_ids_of_train(tmp_path):
    train = convert(image_split(tmp_path / "train", DIGITS), tmp_path / "train_cache")
    assert train.features["label"].names == DIGITS
    val = image_split(tmp_path / "val", ["digit_3"])

    # Without a flag the split makes its own classes: digit_3 becomes id 0.
    convert(val, tmp_path / "alone")
    assert set(labels_by_path(str(tmp_path / "alone")).values()) == {0}

    for flags in (["--classes", ",".join(DIGITS)], ["--classes_from", str(tmp_path / "train_cache")]):
        out = tmp_path / flags[0].strip("-")
        manifest = convert(val, out, *flags)
        assert manifest.features["label"].names == DIGITS
        assert labels_by_path(str(out)) == {"digit_3/0.png": 3, "digit_3/1.png": 3}


@pytest.mark.timeout(300)
def test_classes_given_in_another_order_set_the_ids(tmp_path):
    root = image_split(tmp_path / "in", ["b", "a"])
    convert(root, tmp_path / "out", "--classes", "b,c,a")
    assert read_metadata(str(tmp_path / "out")).features["label"].names == ["b", "c", "a"]
    assert labels_by_path(str(tmp_path / "out")) == {"a/0.png": 2, "a/1.png": 2, "b/0.png": 0, "b/1.png": 0}


@pytest.mark.timeout(300)
def test_an_append_of_some_of_the_classes_takes_the_cache_classes(tmp_path, capsys):
    out = tmp_path / "cache"
    convert(image_split(tmp_path / "first", DIGITS, per_class=1), out)
    manifest = convert(image_split(tmp_path / "more", ["digit_2"], per_class=1), out, "--mode", "append")
    assert manifest.version == 2 and manifest.num_rows == 5
    rows = list(ShardedDataset(str(out), image_mode="bytes"))
    assert [row["label"] for row in rows] == [0, 1, 2, 3, 2]

    # A class the cache lacks is refused by name, before anything runs.
    err = usage_error(capsys, convert, image_split(tmp_path / "new", ["digit_2", "digit_9"], per_class=1), out,
                      "--mode", "append")
    assert "'digit_9'" in err and "not one of the 4 classes" in err and "--mode append" in err
    assert read_metadata(str(out)).version == 2


@pytest.mark.timeout(300)
def test_a_folder_outside_the_classes_is_refused_or_each_image_is_a_bad_input(tmp_path, capsys):
    root = image_split(tmp_path / "in", ["cat", "dog", "emu"])
    err = usage_error(capsys, convert, root, tmp_path / "out", "--classes", "cat,dog")
    assert "class folder 'emu'" in err and "--classes" in err and "'cat', 'dog'" in err
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()

    manifest = convert(root, tmp_path / "out", "--classes", "cat,dog", "--skip_bad", "--max_bad", "2")
    assert manifest.num_rows == 4
    bad = read_bad_inputs(str(tmp_path / "out"))
    assert len(bad) == 2 and all("emu" in record["input"] and "unknown class name; got str 'emu'" in record["error"]
                                 for record in bad)


def _cache(path, features: Features, row: dict) -> str:
    write_shards([row], str(path), features)
    return str(path)


def test_classes_from_names_the_column_it_takes_or_says_why_it_cannot(tmp_path):
    one = _cache(tmp_path / "one", Features({"y": ClassLabel(names=["a", "b"]), "n": Value("int64")}), {"y": 1, "n": 0})
    assert classes_of_cache(one, None) == ["a", "b"] and classes_of_cache(one, "y") == ["a", "b"]
    two = _cache(tmp_path / "two", Features({"y": ClassLabel(names=["a"]), "z": ClassLabel(names=["b"])}),
                 {"y": 0, "z": 0})
    assert classes_of_cache(two, "z") == ["b"]
    cases = [
        (two, None, "has several, 'y', 'z'; name one with --label_column"),
        (_cache(tmp_path / "none", Features({"n": Value("int64")}), {"n": 1}), None, "it has none (its columns: n"),
        (one, "n", "its column 'n' is Value('int64'), not a ClassLabel"),
        (one, "w", "has no column 'w'"),
        (_cache(tmp_path / "ids", Features({"y": ClassLabel(num_classes=3)}), {"y": 2}), None,
         "has no class names, only num_classes=3"),
        (str(tmp_path / "missing"), None, "--classes_from " + str(tmp_path / "missing")),
    ]
    for path, column, words in cases:
        with pytest.raises(ValueError) as raised:
            classes_of_cache(path, column)
        assert words in str(raised.value) and path in str(raised.value)


@pytest.mark.parametrize("text, words", [("a,,b", "empty class name"), ("a,b,a", "names 'a' more than once"),
                                         ("", "empty class name")])
def test_classes_flag_refuses_empty_and_repeated_names(text, words):
    with pytest.raises(ValueError, match=words):
        parse_classes(text)
    assert parse_classes(" x , y ") == ["x", "y"]


def test_class_label_of_values_with_classes_keeps_them_and_names_a_value_outside():
    label = common.class_label_of_values("y", ["b", None, 0], True, ["a", "b", "c"])
    assert label.names == ["a", "b", "c"] and label.nullable
    for outside in ("d", 3, True):
        with pytest.raises(FeatureError) as raised:
            common.class_label_of_values("y", ["a", outside], False, ["a", "b", "c"])
        assert f"column 'y' holds {outside!r}" in str(raised.value) and "'a', 'b', 'c'" in str(raised.value)
    # Under --skip_bad the write refuses the row instead, a bad input counted by --max_bad.
    assert common.class_label_of_values("y", ["d"], False, ["a"], skip_bad=True).names == ["a"]


def _labelled_parquet(path, labels: list) -> str:
    pq.write_table(pa.table({"text": [f"row {i}" for i in range(len(labels))], "y": labels}), path)
    return str(path)


@pytest.mark.timeout(300)
def test_parquet_label_column_takes_the_classes_given(tmp_path, capsys):
    data = _labelled_parquet(tmp_path / "val.parquet", ["cat", "emu", "cat"])
    flags = ["--input", data, "--label_column", "y", RUNNER]
    manifest = parquet.run(flags + ["--output", str(tmp_path / "out"), "--classes", "ant,cat,emu"])
    assert manifest.features["y"].names == ["ant", "cat", "emu"]
    assert [row["y"] for row in ShardedDataset(str(tmp_path / "out"))] == [1, 2, 1]

    err = usage_error(capsys, parquet.run, flags + ["--output", str(tmp_path / "no"), "--classes", "cat,dog"])
    assert "--classes: label column 'y' holds 'emu'" in err and "'cat', 'dog'" in err
    manifest = parquet.run(flags + ["--output", str(tmp_path / "skip"), "--classes", "cat,dog", "--max_bad", "1"])
    [bad] = read_bad_inputs(str(tmp_path / "skip"))
    assert manifest.num_rows == 2 and "unknown class name; got str 'emu'" in bad["error"]


def test_classes_need_a_label_column_and_no_features_file(tmp_path, capsys):
    data = _labelled_parquet(tmp_path / "val.parquet", ["cat"])
    flags = ["--input", data, "--output", str(tmp_path / "out"), RUNNER, "--classes", "cat"]
    assert "--classes gives the classes of the --label_column" in usage_error(capsys, parquet.run, flags)
    (tmp_path / "features.json").write_text(Features({"text": Value("string"), "y": Value("string")}).to_json())
    err = usage_error(capsys, parquet.run, flags + ["--features", str(tmp_path / "features.json")])
    assert "with --features declare them in the ClassLabel" in err
    err = usage_error(capsys, parquet.run, flags[:-2] + ["--classes", "a", "--classes_from", "x"])
    assert "not allowed with argument" in err


@pytest.mark.timeout(300)
def test_parquet_ids_of_named_classes_are_pinned_only_where_their_names_stay(tmp_path, capsys):
    hf = {"info": {"features": {"y": {"names": ["cat", "dog"], "_type": "ClassLabel"},
                                "text": {"dtype": "string", "_type": "Value"}}}}
    table = pa.table({"text": ["a", "b"], "y": [1, 0]}).replace_schema_metadata({"huggingface": json.dumps(hf)})
    pq.write_table(table, tmp_path / "hf.parquet")
    flags = ["--input", str(tmp_path / "hf.parquet"), "--label_column", "y", RUNNER]
    manifest = parquet.run(flags + ["--output", str(tmp_path / "out"), "--classes", "cat,dog,emu"])
    assert manifest.features["y"].names == ["cat", "dog", "emu"]
    assert [row["y"] for row in ShardedDataset(str(tmp_path / "out"))] == [1, 0]
    err = usage_error(capsys, parquet.run, flags + ["--output", str(tmp_path / "no"), "--classes", "dog,cat"])
    assert "holds the ids of a ClassLabel of 'cat', 'dog' (the file's metadata)" in err and "'dog', 'cat'" in err


@pytest.mark.timeout(300)
def test_tfrecord_label_column_takes_the_classes_of_another_cache(tmp_path, capsys):
    train = _cache(tmp_path / "train", Features({"label": ClassLabel(names=["ant", "bee", "cow"])}), {"label": 0})
    writer = tfrecord_package.TFRecordWriter(str(tmp_path / "val.tfrecord"))
    for name in (b"cow", b"cow", b"bee"):
        writer.write({"label": (name, "byte"), "n": (1, "int")})
    writer.close()
    flags = ["--input", str(tmp_path / "val.tfrecord"), "--label_column", "label", RUNNER]
    manifest = tfrecord.run(flags + ["--output", str(tmp_path / "out"), "--classes_from", train])
    assert manifest.features["label"].names == ["ant", "bee", "cow"]
    assert [row["label"] for row in ShardedDataset(str(tmp_path / "out"))] == [2, 2, 1]
    err = usage_error(capsys, tfrecord.run, flags + ["--output", str(tmp_path / "no"), "--classes", "ant,bee"])
    assert "label column 'label' holds 'cow', which is not one of its 2 classes ('ant', 'bee')" in err
