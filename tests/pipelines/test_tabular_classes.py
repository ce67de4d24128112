"""Stable labels in the csv and jsonl pipelines: --classes, --classes_from and appends keep class ids."""

from __future__ import annotations

import json

import pytest

from beam_shards import ShardedDataset, read_metadata
from pipelines import csv, jsonl

RUNNER = "--runner=FnApiRunner"
ANIMALS = ["bird", "cat", "dog"]


def labels(path) -> list[int]:
    return [row["label"] for row in ShardedDataset(str(path))]


def write_csv(path, names: list[str]):
    path.write_text("n,label\n" + "".join(f"{i},{name}\n" for i, name in enumerate(names)))
    return path


@pytest.mark.timeout(300)
def test_a_csv_split_lacking_a_class_keeps_the_ids_of_train(tmp_path):
    train = csv.run(["--input", str(write_csv(tmp_path / "train.csv", ANIMALS * 2)), "--output",
                     str(tmp_path / "train"), "--label_column", "label", RUNNER])
    assert train.features["label"].names == ANIMALS
    val = write_csv(tmp_path / "val.csv", ["dog", "dog"])
    alone = csv.run(["--input", str(val), "--output", str(tmp_path / "alone"), "--label_column", "label", RUNNER])
    assert alone.features["label"].names == ["dog"]  # without a flag the split makes its own classes
    for flags in (["--classes", ",".join(ANIMALS)], ["--classes_from", str(tmp_path / "train")]):
        out = tmp_path / flags[0].strip("-")
        manifest = csv.run(["--input", str(val), "--output", str(out), "--label_column", "label", RUNNER, *flags])
        assert manifest.features["label"].names == ANIMALS
        assert labels(out) == [2, 2]


@pytest.mark.timeout(300)
def test_a_jsonl_append_of_some_classes_takes_the_cache_classes(tmp_path):
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps({"n": i, "label": name}) + "\n" for i, name in enumerate(ANIMALS)))
    out = str(tmp_path / "cache")
    jsonl.run(["--input", str(first), "--output", out, "--label_column", "label", RUNNER])
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"n": 9, "label": "dog"}) + "\n")
    manifest = jsonl.run(["--input", str(more), "--output", out, "--label_column", "label", "--mode", "append",
                          RUNNER])
    assert manifest.version == 2 and read_metadata(out).features["label"].names == ANIMALS
    assert labels(out) == [0, 1, 2, 2]


@pytest.mark.timeout(300)
def test_a_label_outside_the_given_classes_is_a_usage_error_naming_it(tmp_path, capsys):
    data = write_csv(tmp_path / "data.csv", ["cat", "cow"])
    with pytest.raises(SystemExit) as exit_:
        csv.run(["--input", str(data), "--output", str(tmp_path / "out"), "--label_column", "label",
                 "--classes", ",".join(ANIMALS), RUNNER])
    assert exit_.value.code == 2
    assert "'cow'" in capsys.readouterr().err
