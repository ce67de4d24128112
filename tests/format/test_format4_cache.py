"""The saved format-4 cache (tests/data/format4_cache) read row for row with today's code, and appended to."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa

from beam_shards import ArrowBackend, ShardedDataset, cli, list_versions, read_metadata, verify, write_shards
from beam_shards.versions.gc import Retention, collect_garbage

from _reliability import leftovers
from _support import FEATURES, example
from test_formats import ids, saved


def assert_rows_as_written(path: str, count: int, version: int | None = None) -> None:
    """Rows 0..count-1 of `path` (at `version`) are `example(i)`, every column compared."""
    dataset = ShardedDataset(path, version=version, image_mode="bytes")
    assert len(dataset) == count
    for i, row in enumerate(dataset[list(range(count))]):
        want = example(i)
        assert (row["id"], row["image"], row["label"], row["caption"], row["tags"]) == (
            want["id"], want["image"], want["label"], want["caption"], want["tags"]), f"row {i}"
        np.testing.assert_array_equal(row["embedding"], want["embedding"], err_msg=f"row {i}")


def test_format4_cache_reads_every_version_row_for_row(tmp_path, capsys):
    path = saved("format4_cache", tmp_path)
    versions = list_versions(path)
    assert [(m.version, m.format_version, m.column_types, m.mode, m.num_rows, m.num_shards) for m in versions] == [
        (1, 4, "hf", "overwrite", 24, 6), (2, 4, "hf", "append", 40, 10)]
    assert read_metadata(path).metadata == {"made_by": "tests/data/README.md"}
    stats = versions[1].statistics.columns
    assert stats["label"].classes == (4,) * 10 and (stats["id"].min, stats["id"].max) == (0, 39)
    assert stats["tags"].items == sum(i % 3 for i in range(40)) and {s.rows for s in stats.values()} == {40}
    assert_rows_as_written(path, 40)
    assert_rows_as_written(path, 24, version=1)
    table = ArrowBackend.open(path).take([39, 0, 17])
    assert table.schema.field("caption").type == pa.string(), "format 4 stores Hugging Face's column types"
    assert table.column("id").to_pylist() == [39, 0, 17]
    assert verify(path).ok and verify(path, version=1).ok
    assert cli.main(["info", path]) == 0
    assert "format       4, columns in Hugging Face's types" in capsys.readouterr().out


def test_format4_cache_takes_appends_that_list_its_shards_again(tmp_path):
    path = saved("format4_cache", tmp_path)
    old_shards = [s.file for s in read_metadata(path).shards]
    appended = write_shards((example(i) for i in range(40, 45)), path, FEATURES, mode="append", retention=None)
    # Format 5 adds no column types, so an append onto format 4 is written in format 5 (its new shards' batches
    # are located and checked alone); its base's shards are listed again as they are, read by their footers.
    assert (appended.version, appended.format_version, appended.column_types, appended.num_rows) == (3, 5, "hf", 45)
    assert [s.file for s in appended.shards][:10] == old_shards, "the format-4 shards are listed again, not copied"
    assert [appended.shards.batch_spans(k) is None for k in range(11)] == [True] * 10 + [False]
    assert [span.rows for span in appended.shards.batch_spans(10)] == [5]
    assert appended.statistics.columns["tags"].items == sum(i % 3 for i in range(45))
    assert_rows_as_written(path, 45)
    assert ids(path, version=2) == list(range(40)) and read_metadata(path, version=2).format_version == 4
    collect_garbage(path, Retention(keep=1, min_age=datetime.timedelta(0)))
    assert [m.version for m in list_versions(path)] == [3]
    assert_rows_as_written(path, 45)
    assert not leftovers(path) and verify(path).ok
