"""Caches of earlier formats (saved in tests/data) read with today's code, and take format-3 versions."""

from __future__ import annotations

import datetime
import json
import os
import shutil

from beam_shards import ArrowBackend, ShardedDataset, list_versions, read_metadata, verify, write_shards
from beam_shards.format.layout import CacheLayout
from beam_shards.versions.gc import Retention, collect_garbage

from _reliability import leftovers
from _support import FEATURES, example

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def ids(path: str, version: int | None = None) -> list[int]:
    backend = ArrowBackend.open(path, version=version)
    return backend.slice(0, backend.num_rows).column("id").to_pylist()


def test_format2_cache_reads_every_version_as_written(tmp_path):
    path = str(tmp_path / "old")
    shutil.copytree(os.path.join(DATA, "format2_cache"), path)
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
    path = str(tmp_path / "old")
    shutil.copytree(os.path.join(DATA, "format2_cache"), path)
    old_shards = [s.file for s in read_metadata(path).shards]
    appended = write_shards((example(i) for i in range(40, 45)), path, FEATURES, mode="append", retention=None)
    assert (appended.version, appended.format_version, appended.num_rows) == (3, 3, 45)
    assert appended.statistics is None, "an append onto a version without statistics cannot know them"
    with open(CacheLayout(path).manifest) as handle:
        header = json.load(handle)
    assert header["format_version"] == 3 and "shards" not in header and len(header["tables"]) == 2
    assert [s.file for s in appended.shards][:10] == old_shards, "the format-2 shards are listed again, not copied"
    assert ids(path) == list(range(45)) and ids(path, version=2) == list(range(40))
    collect_garbage(path, Retention(keep=1, min_age=datetime.timedelta(0)))
    assert [m.version for m in list_versions(path)] == [3] and ids(path) == list(range(45))
    assert not leftovers(path) and verify(path).ok
    overwritten = write_shards((example(i) for i in range(5)), path, FEATURES)
    assert overwritten.statistics.num_rows == 5
    assert overwritten.statistics.columns["label"].classes == (1,) * 5 + (0,) * 5


def test_format1_cache_takes_format3_versions(tmp_path):
    path = str(tmp_path / "old")
    shutil.copytree(os.path.join(DATA, "format1_cache"), path)
    appended = write_shards((example(i) for i in range(40, 42)), path, FEATURES, mode="append", retention=None)
    assert (appended.version, appended.format_version) == (2, 3)
    assert read_metadata(path, version=1).format_version == 2, "the format-1 version is kept in format 2"
    assert ids(path) == list(range(42)) and ids(path, version=1) == list(range(40)) and verify(path).ok
