"""Cache paths with unusual names: glob characters, spaces and file:// URIs."""

from __future__ import annotations

import os

import apache_beam as beam
import pytest

from _support import FEATURES, example, options
from beam_shards import ArrowBackend, WriteToArrowShards, read_metadata, verify, write_shards


@pytest.mark.parametrize("name", ["c[1]", "with space", "star*", "q?", "ünïcode"])
def test_local_paths_with_glob_characters_write_overwrite_and_clean_up(tmp_path, name):
    path = str(tmp_path / name)
    first = write_shards((example(i) for i in range(30)), path, FEATURES, shard_size_bytes=8_000)
    second = write_shards((example(i) for i in range(40)), path, FEATURES, shard_size_bytes=8_000)
    files = os.listdir(path)
    assert not [f for f in files if first.write_id in f], "the replaced version must be removed"
    assert "_staging" not in files
    assert read_metadata(path).write_id == second.write_id and verify(path).ok


def test_file_uri_paths_work_for_write_and_read(tmp_path):
    uri = f"file://{tmp_path}/cache"
    with beam.Pipeline(options=options()) as p:
        p | beam.Create(range(20)) | beam.Map(example) | WriteToArrowShards(uri, FEATURES)
    write_shards((example(i) for i in range(5)), uri, FEATURES)
    assert ArrowBackend.open(uri).num_rows == 5
    assert sorted(os.listdir(tmp_path / "cache")) == [".lock", "_metadata.json",
                                                      f"shard-{read_metadata(uri).write_id}-00000-of-00001.arrow"]


def test_gc_in_a_folder_with_glob_characters(tmp_path):
    from beam_shards.gc import collect_garbage, find_garbage

    path = str(tmp_path / "c[1]")
    manifest = write_shards((example(i) for i in range(10)), path, FEATURES)
    os.makedirs(os.path.join(path, "_staging", "20260101T000000Z-00000000", "attempt"))
    with open(os.path.join(path, "_staging", "20260101T000000Z-00000000", "attempt", "part-00000.arrow"), "wb") as f:
        f.write(b"partial")
    garbage = find_garbage(path)
    assert list(garbage.files) == ["_staging/20260101T000000Z-00000000/attempt/part-00000.arrow"]
    collect_garbage(garbage)
    assert sorted(os.listdir(path)) == sorted([".lock", "_metadata.json", manifest.shards[0].path])
