"""Cache paths with unusual names: glob characters, spaces and file:// URIs."""

from __future__ import annotations

import datetime
import os

import apache_beam as beam
import pytest

from beam_shards import ArrowBackend, Retention, WriteToArrowShards, read_metadata, verify, write_shards
from beam_shards.versions.gc import collect_garbage

from _support import FEATURES, clean_up, example, options


@pytest.mark.parametrize("name", ["c[1]", "with space", "star*", "q?", "ünïcode"])
def test_local_paths_with_glob_characters_write_overwrite_and_clean_up(tmp_path, name):
    path = str(tmp_path / name)
    first = write_shards((example(i) for i in range(30)), path, FEATURES, shard_size_bytes=8_000)
    second = write_shards((example(i) for i in range(40)), path, FEATURES, shard_size_bytes=8_000)
    assert "_staging" not in os.listdir(path)
    assert read_metadata(path).write_id == second.write_id and verify(path).ok
    garbage = collect_garbage(path, Retention(keep=1, min_age=datetime.timedelta(0)))
    assert garbage.removed_versions == [1]
    assert not [f for f in os.listdir(path) if first.write_id in f], "retention must remove the replaced version"
    assert verify(path).ok


def test_file_uri_paths_work_for_write_and_read(tmp_path):
    uri = f"file://{tmp_path}/cache"
    with beam.Pipeline(options=options()) as p:
        p | beam.Create(range(20)) | beam.Map(example) | WriteToArrowShards(uri, FEATURES)
    write_shards((example(i) for i in range(5)), uri, FEATURES)
    assert ArrowBackend.open(uri).num_rows == 5 and ArrowBackend.open(uri, version=1).num_rows == 20
    collect_garbage(uri, Retention(keep=1, min_age=datetime.timedelta(0)))
    assert sorted(os.listdir(tmp_path / "cache")) == [".lock", "_metadata.json", "_tables", "_versions",
                                                      f"shard-{read_metadata(uri).write_id}-00000-of-00001.arrow"]


def test_gc_in_a_folder_with_glob_characters(tmp_path):
    path = str(tmp_path / "c[1]")
    manifest = write_shards((example(i) for i in range(10)), path, FEATURES)
    attempt = os.path.join(path, "_staging", "20260101T000000Z-00000000", "a" * 32)
    os.makedirs(attempt)
    with open(os.path.join(attempt, "part-00000.arrow"), "wb") as f:
        f.write(b"partial")
    garbage = clean_up(path)
    assert list(garbage.files) == [f"_staging/20260101T000000Z-00000000/{'a' * 32}/part-00000.arrow"]
    assert sorted(os.listdir(path)) == sorted([".lock", "_metadata.json", "_tables", "_versions", manifest.shards[0].file])


def test_create_makes_its_folder_again_when_another_write_removed_it_meanwhile(tmp_path, monkeypatch):
    """The race two local writers ran into: one removed the empty `_staging/` between the other's makedirs and open."""
    from beam_shards.storage import fs, local_files

    target = tmp_path / "_staging" / "write" / "part-00000.arrow"
    removed, create_new = [], local_files.create_new

    def racing_create(path):
        if not removed and str(path) == str(target):
            removed.append(1)
            os.rmdir(target.parent)
            os.rmdir(target.parent.parent)
        return create_new(path)

    monkeypatch.setattr(local_files, "create_new", racing_create)
    with fs.create(str(target)) as handle:
        handle.write(b"x")
    assert removed and target.read_bytes() == b"x"
