"""`BundleWriter`: one bundle's rows into staged shards, without Beam (start, add, finish, discard)."""

from __future__ import annotations

import os

import pytest

from beam_shards import EncodeError, Features, Value
from beam_shards.beam.staging import BundleWriter
from beam_shards.format.layout import CacheLayout, new_write_id
from beam_shards.shards.options import WriterOptions

pytestmark = pytest.mark.timeout(60)

FEATURES = Features({"id": Value("int64")})
OPTIONS = WriterOptions(shard_size_bytes=1 << 20, batch_size=4)
WRITE_ID = new_write_id()


def _staged(path: str) -> list[str]:
    staging = os.path.join(path, "_staging")
    return sorted(name for _, _, names in os.walk(staging) for name in names)


def test_each_bundle_is_staged_in_an_attempt_folder_of_its_own(tmp_path):
    writer = BundleWriter(str(tmp_path), FEATURES, OPTIONS)
    shards = []
    for bundle in range(2):
        writer.start(WRITE_ID)
        for i in range(10):
            writer.add({"id": bundle * 10 + i}, i)
        shards += writer.finish()
    assert not writer.started
    assert sum(shard.num_rows for shard in shards) == 20
    folders = {os.path.dirname(shard.path) for shard in shards}
    assert len(folders) == 2 and all(folder.startswith(CacheLayout(str(tmp_path)).staging(WRITE_ID)) for folder in folders)


def test_a_failed_add_removes_what_the_bundle_staged(tmp_path):
    writer = BundleWriter(str(tmp_path), FEATURES, WriterOptions(shard_size_bytes=1 << 20, batch_size=1))
    writer.start(WRITE_ID)
    writer.add({"id": 1}, 1)
    assert _staged(str(tmp_path)), "a shard should be open before the failure"
    with pytest.raises(EncodeError, match="example 2"):
        writer.add({"id": "not an int"}, 2)
    assert not writer.started and not [name for name in _staged(str(tmp_path)) if name.endswith(".arrow")]


def test_skipped_examples_become_dead_letters_without_the_hidden_columns(tmp_path):
    features = Features({"id": Value("int64"), "extra": Value("int64")})
    writer = BundleWriter(str(tmp_path), features, OPTIONS, skip_bad=True, hidden=("extra",))
    writer.start(WRITE_ID)
    writer.add({"id": "bad", "extra": 7}, "k1")
    writer.add({"id": 2, "extra": 8}, "k2")
    shards = writer.finish()
    [letter] = writer.take_letters()
    assert letter["key"] == "k1" and letter["example"] == {"id": "bad"} and "id" in letter["reason"]
    assert [shard.num_rows for shard in shards] == [1] and writer.take_letters() == []


def test_adding_before_a_bundle_is_started_is_refused(tmp_path):
    writer = BundleWriter(str(tmp_path), FEATURES, OPTIONS)
    with pytest.raises(RuntimeError, match="start a bundle"):
        writer.add({"id": 1}, 1)
    with pytest.raises(RuntimeError, match="start a bundle"):
        writer.finish()
