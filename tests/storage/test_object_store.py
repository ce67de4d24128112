"""The object-store path (gs://, s3://): no folders, no atomic rename, everything via FileSystems."""

from __future__ import annotations

import datetime
import os

import apache_beam as beam
import fake_object_store
import pytest

from beam_shards import (ArrowBackend, CacheNotFoundError, Features, Image, Retention, ShardedDataset, Video,
                         WriteToArrowShards, encode_example, list_versions, read_metadata, verify, write_shards)
from beam_shards.storage import fs
from beam_shards.versions.gc import collect_garbage

from _support import FEATURES, example, jpeg, options


@pytest.fixture
def store(tmp_path, monkeypatch):
    root = tmp_path / "bucket"
    root.mkdir()
    monkeypatch.setenv(fake_object_store.ROOT_ENV, str(root))
    return root


def _objects(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files)


def test_fake_store_has_object_semantics(store):
    assert not fs.has_atomic_rename("fakeobj://cache/_metadata.json")
    fs.write_bytes("fakeobj://a/b/c.bin", b"x")
    assert fs.exists("fakeobj://a/b/c.bin") and not fs.exists("fakeobj://a/b")


def test_sink_publishes_and_cleans_up_on_an_object_store(store):
    path = "fakeobj://cache"
    with beam.Pipeline(options=options()) as p:
        (p | beam.Create(range(3)) | beam.FlatMap(lambda k: (example(k * 40 + i) for i in range(40)))
         | WriteToArrowShards(path, FEATURES, shard_size_bytes=20_000, batch_size=16))
    manifest = read_metadata(path)
    assert manifest.num_rows == 120 and manifest.num_shards > 1
    objects = _objects(store)
    assert "cache/_metadata.json" in objects
    assert not [o for o in objects if "_staging" in o or o.endswith(".tmp")], objects
    assert sorted(o for o in objects if o.endswith(".arrow")) == sorted(
        [f"cache/{s.file}" for s in manifest.shards] + [f"cache/_tables/{ref.file}" for ref in manifest.shards.refs])
    ids = ArrowBackend.open(path).slice(0, 120).column("id").to_pylist()
    assert sorted(ids) == list(range(120))
    row = ShardedDataset(path, image_mode="bytes")[ids.index(5)]
    assert row["caption"] == example(5)["caption"] and row["image"] == example(5)["image"]
    assert verify(path).ok


def test_overwrite_and_failed_write_on_an_object_store(store):
    path = "fakeobj://cache"
    first = write_shards((example(i) for i in range(30)), path, FEATURES, shard_size_bytes=10_000)
    second = write_shards((example(i) for i in range(100, 110)), path, FEATURES)
    assert read_metadata(path).write_id == second.write_id and read_metadata(path, version=1).num_rows == 30
    assert collect_garbage(path, Retention(keep=1, min_age=datetime.timedelta(0))).removed_versions == [1]
    assert not [o for o in _objects(store) if first.write_id in o], "retention must delete the replaced version"

    def failing():
        for i in range(50):
            yield example(i)
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError, match="source failed"):
        write_shards(failing(), path, FEATURES, shard_size_bytes=10_000)
    assert read_metadata(path).write_id == second.write_id
    assert not [o for o in _objects(store) if "_staging" in o], _objects(store)
    assert [m.version for m in list_versions(path)] == [2]


def test_missing_cache_on_an_object_store(store):
    with pytest.raises(CacheNotFoundError, match="no beam_shards cache at fakeobj://nothing"):
        read_metadata("fakeobj://nothing")


def test_glob_characters_are_refused_in_remote_cache_paths(store):
    with pytest.raises(ValueError, match=r"may not contain \*, \? or \["):
        WriteToArrowShards("fakeobj://cache[1]", FEATURES)
    with pytest.raises(ValueError, match=r"may not contain"):
        write_shards([], "fakeobj://c*", FEATURES)


def test_image_and_video_paths_on_an_object_store_are_read_byte_for_byte(store):
    (store / "media").mkdir()
    (store / "media" / "photo.jpg").write_bytes(jpeg(3))
    (store / "media" / "clip.mp4.gz").write_bytes(b"not really gzip")
    features = Features({"image": Image(), "video": Video()})
    row = encode_example({"image": "fakeobj://media/photo.jpg", "video": "fakeobj://media/clip.mp4.gz"}, features)
    assert row == {"image": jpeg(3), "video": b"not really gzip"}
