"""Caches of earlier formats (saved in tests/data) read with today's code, and take versions of today's format."""

from __future__ import annotations

import datetime
import json
import os
import shutil

import pyarrow as pa
import pytest

from beam_shards import (ArrowBackend, SchemaMismatchError, ShardedDataset, cli, list_versions, read_metadata, verify,
                         write_shards)
from beam_shards.format.layout import CacheLayout, new_write_id
from beam_shards.shards.options import WriterOptions
from beam_shards.shards.writer import ShardWriter
from beam_shards.versions.commit import check_write, publish
from beam_shards.versions.compaction import compact
from beam_shards.versions.gc import Retention, collect_garbage
from beam_shards.versions.staging import staged_shards

from _paths import DATA
from _reliability import leftovers
from _support import FEATURES, example


def saved(name: str, tmp_path) -> str:
    """A copy of the saved cache `name` in `tmp_path` (tests change their copy)."""
    path = str(tmp_path / "old")
    shutil.copytree(os.path.join(DATA, name), path)
    return path


def ids(path: str, version: int | None = None) -> list[int]:
    backend = ArrowBackend.open(path, version=version)
    return backend.slice(0, backend.num_rows).column("id").to_pylist()


def test_format2_cache_reads_every_version_as_written(tmp_path):
    path = saved("format2_cache", tmp_path)
    versions = list_versions(path)
    assert [(m.version, m.format_version, m.num_rows, m.num_shards) for m in versions] == [(1, 2, 24, 6),
                                                                                          (2, 2, 40, 10)]
    assert all(m.statistics is None for m in versions), "format 2 recorded no statistics"
    assert ids(path) == list(range(40)) and ids(path, version=1) == list(range(24))
    assert read_metadata(path).metadata == {"made_by": "tests/data/README.md"}
    dataset = ShardedDataset(path, image_mode="bytes")
    assert dataset[31]["caption"] == example(31)["caption"] and dataset[31]["image"] == example(31)["image"]
    assert verify(path).ok and verify(path, version=1).ok


def test_format2_cache_takes_format3_versions_and_gc_keeps_what_they_share(tmp_path):
    path = saved("format2_cache", tmp_path)
    old_shards = [s.file for s in read_metadata(path).shards]
    appended = write_shards((example(i) for i in range(40, 45)), path, FEATURES, mode="append", retention=None)
    assert (appended.version, appended.format_version, appended.num_rows) == (3, 3, 45)
    assert appended.statistics is None, "an append onto a version without statistics cannot know them"
    with open(CacheLayout(path).manifest) as handle:
        header = json.load(handle)
    assert header["format_version"] == 3 and "shards" not in header and len(header["tables"]) == 2
    # Its shards are stored as its base's are: in format 3, which implies their column types, so the beam_shards
    # that wrote the base reads it too.
    assert "column_types" not in header and appended.column_types == "large"
    assert [s.file for s in appended.shards][:10] == old_shards, "the format-2 shards are listed again, not copied"
    assert ids(path) == list(range(45)) and ids(path, version=2) == list(range(40))
    collect_garbage(path, Retention(keep=1, min_age=datetime.timedelta(0)))
    assert [m.version for m in list_versions(path)] == [3] and ids(path) == list(range(45))
    assert not leftovers(path) and verify(path).ok
    overwritten = write_shards((example(i) for i in range(5)), path, FEATURES)
    assert overwritten.statistics.num_rows == 5
    assert overwritten.statistics.columns["label"].classes == (1,) * 5 + (0,) * 5


def test_format1_cache_takes_format3_versions(tmp_path):
    path = saved("format1_cache", tmp_path)
    appended = write_shards((example(i) for i in range(40, 42)), path, FEATURES, mode="append", retention=None)
    assert (appended.version, appended.format_version) == (2, 3)
    assert read_metadata(path, version=1).format_version == 2, "the format-1 version is kept in format 2"
    assert ids(path) == list(range(42)) and ids(path, version=1) == list(range(40)) and verify(path).ok


def test_format3_cache_reads_every_version_as_written(tmp_path, capsys):
    path = saved("format3_cache", tmp_path)
    versions = list_versions(path)
    assert [(m.version, m.format_version, m.column_types, m.num_rows, m.num_shards) for m in versions] == [
        (1, 3, "large", 24, 6), (2, 3, "large", 40, 10)]
    assert versions[1].statistics.columns["label"].classes == (4,) * 10
    assert ids(path) == list(range(40)) and ids(path, version=1) == list(range(24))
    table = ArrowBackend.open(path).slice(0, 2)
    assert table.schema.field("caption").type == pa.large_string(), "format 3 stored 64-bit offsets"
    dataset = ShardedDataset(path, image_mode="bytes")
    assert dataset[31]["tags"] == example(31)["tags"] and dataset[31]["image"] == example(31)["image"]
    assert verify(path).ok and verify(path, version=1).ok
    assert cli.main(["info", path]) == 0
    assert "format       3, columns with 64-bit offsets (HF's loader sees large_string" in capsys.readouterr().out


def test_format3_cache_takes_appends_in_its_own_column_types_and_overwrites_in_hugging_faces(tmp_path):
    path = saved("format3_cache", tmp_path)
    appended = write_shards((example(i) for i in range(40, 45)), path, FEATURES, mode="append", retention=None)
    assert (appended.version, appended.format_version, appended.column_types) == (3, 3, "large")
    assert ids(path) == list(range(45)) and ShardedDataset(path)[42]["caption"] == example(42)["caption"]
    assert verify(path).ok
    compacted = compact(path, shard_size_bytes=1 << 20)[1]
    assert (compacted.num_shards, compacted.format_version, compacted.column_types) == (1, 3, "large")
    assert ids(path) == list(range(45))
    overwritten = write_shards((example(i) for i in range(5)), path, FEATURES, retention=None)
    assert (overwritten.format_version, overwritten.column_types) == (5, "hf")
    assert ArrowBackend.open(path).slice(0, 1).schema.field("caption").type == pa.string()
    assert ids(path) == list(range(5)) and ids(path, version=4) == list(range(45)) and verify(path, version=3).ok


def test_an_append_whose_base_was_rewritten_in_other_column_types_meanwhile_publishes_nothing(tmp_path):
    path = saved("format3_cache", tmp_path)
    metadata, since, column_types = check_write(path, FEATURES, None, "append")
    assert column_types == "large", "an append is written in its base's column types"
    options = WriterOptions(column_types=column_types)
    write_id = new_write_id()
    writer = ShardWriter(FEATURES, staged_shards(CacheLayout(path).new_attempt(write_id)), options)
    for i in range(40, 43):
        writer.add(example(i), i)
    staged = writer.close()
    rewritten = write_shards((example(i) for i in range(5)), path, FEATURES, retention=None)  # lands meanwhile
    assert rewritten.column_types == "hf"
    with pytest.raises(SchemaMismatchError, match="stores its columns in 'hf' types and the append's shards are in "
                                                  "'large' types; nothing was published, run the append again"):
        publish(path, write_id=write_id, features=FEATURES, staged=staged, options=options, metadata=metadata,
                mode="append", since=since)
    assert read_metadata(path).version == 3 and ids(path) == list(range(5))
    assert not leftovers(path) and verify(path).ok


def test_a_format3_cache_written_anew_from_its_batches_gets_hugging_faces_types(tmp_path):
    path = saved("format3_cache", tmp_path)
    anew = str(tmp_path / "anew")
    manifest = write_shards(ArrowBackend.open(path).iter_batches(), anew, read_metadata(path).features)
    assert (manifest.format_version, manifest.column_types, manifest.num_rows) == (5, "hf", 40)
    old, new = (ArrowBackend.open(where).slice(0, 40) for where in (path, anew))
    assert new.schema.field("caption").type == pa.string() and new.cast(old.schema).equals(old)
