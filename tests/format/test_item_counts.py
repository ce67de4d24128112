"""A version's statistics give each column's rows and, for list columns, how many items their lists hold."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from beam_shards import Array, CorruptCacheError, Features, Sequence, Struct, Value, cli, read_metadata, write_shards
from beam_shards.format.layout import CacheLayout
from beam_shards.format.statistics import Statistics

from _paths import DATA
from _support import FEATURES, example

LISTS = Features({
    "tags": Sequence(Value("string"), nullable=True),
    "turns": Sequence(Struct({"role": Value("string"), "text": Value("string")})),
    "frames": Array((None, 2), "float32"),
    "pixels": Array((2, 3), "uint8"),
    "id": Value("int64"),
})


def lists_row(i: int) -> dict:
    return {"tags": None if i % 5 == 0 else [str(j) for j in range(i % 4)],
            "turns": [{"role": "user", "text": str(i)}] * (i % 3),
            "frames": np.zeros((i % 6, 2), np.float32), "pixels": np.zeros((2, 3), np.uint8), "id": i}


def expected_items(rows: list[dict]) -> dict[str, int]:
    return {"tags": sum(len(r["tags"]) for r in rows if r["tags"] is not None),
            "turns": sum(len(r["turns"]) for r in rows), "frames": sum(len(r["frames"]) for r in rows)}


def test_items_and_rows_per_column_across_shards_and_appends(tmp_path):
    path = str(tmp_path / "cache")
    first = write_shards([lists_row(i) for i in range(37)], path, LISTS, max_rows_per_shard=5, batch_size=3)
    appended = write_shards([lists_row(i) for i in range(37, 50)], path, LISTS, mode="append")
    for manifest, count in ((first, 37), (appended, 50)):
        columns = read_metadata(path, version=manifest.version).statistics.columns
        rows = [lists_row(i) for i in range(count)]
        assert {name: columns[name].items for name in ("tags", "turns", "frames")} == expected_items(rows)
        assert columns["pixels"].items is None and columns["id"].items is None, "fixed shapes and scalars: no items"
        assert {stats.rows for stats in columns.values()} == {count}
        assert columns["tags"].nulls == sum(r["tags"] is None for r in rows)
    with open(CacheLayout(path).manifest) as handle:
        stored = json.load(handle)["statistics"]["columns"]
    assert stored["tags"]["items"] == expected_items([lists_row(i) for i in range(50)])["tags"]
    assert "items" not in stored["id"]


def test_a_version_written_before_items_were_counted_has_none_until_rewritten(tmp_path):
    path = str(tmp_path / "old")
    shutil.copytree(os.path.join(DATA, "format3_cache"), path)
    assert read_metadata(path).statistics.columns["tags"].items is None
    appended = write_shards([example(i) for i in range(40, 43)], path, FEATURES, mode="append")
    assert appended.statistics.columns["tags"].items is None, "an append cannot know the items of the rows below it"
    assert appended.statistics.columns["tags"].rows == 43
    rewritten = write_shards([example(i) for i in range(43)], path, FEATURES)
    assert rewritten.statistics.columns["tags"].items == sum(i % 3 for i in range(43))


@pytest.mark.parametrize("column, items", [("tags", -1), ("tags", 1.5), ("tags", "2"), ("id", 3)])
def test_a_manifest_with_an_impossible_item_count_is_refused(tmp_path, column, items):
    stats = write_shards([lists_row(i) for i in range(4)], str(tmp_path / "cache"), LISTS).statistics.to_dict()
    stats["columns"][column]["items"] = items
    with pytest.raises(CorruptCacheError, match=f"item count of column '{column}'"):
        Statistics.from_dict(stats, LISTS, "version 7")


def test_info_prints_the_items_of_list_columns(tmp_path, capsys):
    path = str(tmp_path / "cache")
    write_shards([lists_row(i) for i in range(10)], path, LISTS)
    assert cli.main(["info", path]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert lines["frames"].endswith(f"0 null, {expected_items([lists_row(i) for i in range(10)])['frames']:,} items")
    assert "items" not in lines["id"]
