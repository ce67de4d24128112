"""The manifest `_metadata.json`: its fields, and `read_metadata`'s errors on a bad cache."""

from __future__ import annotations

import functools
import json
import os
import re

import pyarrow
import pytest

from beam_shards import (ArrowBackend, CacheNotFoundError, CorruptCacheError, Features, Manifest, Value, read_metadata,
                         write_shards)
from beam_shards.errors import NewerFormatError
from beam_shards.format.version_files import read_table
from beam_shards.format.layout import MANIFEST_NAME, CacheLayout, new_write_id, shard_name, write_id_of_shard
from beam_shards.format.manifest import FORMAT_VERSION

from _reliability import listed_manifest
from _support import FEATURES, example


@pytest.fixture
def cache(tmp_path):
    path = str(tmp_path / "cache")
    write_shards((example(i) for i in range(40)), path, FEATURES, max_rows_per_shard=15, batch_size=5,
                 metadata={"source": "unit test", "n": 40})
    return path


def manifest_file(path: str) -> str:
    return os.path.join(path, MANIFEST_NAME)


def load(path: str) -> dict:
    """The manifest's JSON data in format 2, every shard listed (edits of it test the format-2 reader)."""
    return listed_manifest(path)


def save(path: str, data: dict) -> None:
    with open(manifest_file(path), "w") as handle:
        json.dump(data, handle)


def edit(path: str, change) -> None:
    data = load(path)
    change(data)
    save(path, data)


def corrupt_error(path: str) -> str:
    with pytest.raises(CorruptCacheError) as info:
        read_metadata(path, check_files=True)
    return str(info.value)


def test_header_of_format_version_4_names_its_shard_table_statistics_and_column_types(cache):
    with open(manifest_file(cache)) as handle:
        header = json.load(handle)
    assert header["format"] == "beam_shards" and header["format_version"] == FORMAT_VERSION and "shards" not in header
    assert header["column_types"] == "hf"
    assert header["num_rows"] == 40 and header["num_shards"] == 3
    [table] = header["tables"]
    assert table["num_shards"] == 3 and table["num_rows"] == 40 and table["num_bytes"] == header["num_bytes"]
    assert table["size"] == os.path.getsize(os.path.join(cache, "_tables", table["file"]))
    stats = header["statistics"]["columns"]
    assert stats["id"] == {"rows": 40, "nulls": 0, "min": 0, "max": 39}
    assert stats["label"]["classes"] == [4] * 10 and stats["image"] == {"rows": 40, "nulls": 0}
    with open(os.path.join(cache, "_versions", "00000000000000000001.json")) as handle:
        assert json.load(handle) == header, "_metadata.json is a copy of the latest version's header"


def test_manifest_holds_every_field(cache):
    data = load(cache)
    assert data["format"] == "beam_shards" and data["format_version"] == 2
    assert Features.from_dict(data["features"]) == FEATURES
    assert data["schema_fingerprint"] == FEATURES.fingerprint()
    assert data["num_rows"] == 40 and data["compression"] is None
    assert [s["num_rows"] for s in data["shards"]] == [15, 15, 10]
    for shard in data["shards"]:
        assert set(shard) == {"file", "num_rows", "num_bytes", "checksum"}
        assert shard["num_bytes"] == os.path.getsize(os.path.join(cache, shard["file"]))
        assert re.fullmatch(r"crc32:[0-9a-f]{8}", shard["checksum"])
        assert write_id_of_shard(shard["file"]) == data["write_id"]
    assert data["writer"]["pyarrow"] == pyarrow.__version__
    assert data["writer"]["package"].startswith("beam_shards ")
    assert "apache_beam" in data["writer"] and "python" in data["writer"]
    assert data["metadata"] == {"source": "unit test", "n": 40}
    assert data["num_bytes"] == sum(s["num_bytes"] for s in data["shards"])


def test_read_metadata_returns_what_was_written(cache):
    manifest = read_metadata(cache)
    data = load(cache)
    assert isinstance(manifest, Manifest)
    assert manifest.path == cache and manifest.write_id == data["write_id"]
    assert manifest.features == FEATURES and manifest.num_rows == 40 and manifest.num_shards == 3
    assert manifest.num_bytes == data["num_bytes"] and manifest.metadata == data["metadata"]
    assert manifest.shard_path(2) == os.path.join(cache, data["shards"][2]["file"])
    assert Manifest.from_json(manifest.to_json(), cache, "test", functools.partial(read_table, cache)) == manifest
    assert "num_rows=40" in repr(manifest) and cache in repr(manifest)


def test_no_cache_is_a_clear_not_found_error(tmp_path):
    with pytest.raises(CacheNotFoundError) as info:
        read_metadata(str(tmp_path / "nothing"))
    assert str(tmp_path / "nothing") in str(info.value) and MANIFEST_NAME in str(info.value)
    assert isinstance(info.value, FileNotFoundError)


def test_not_found_mentions_a_write_left_in_staging(tmp_path):
    path = str(tmp_path / "cache")
    os.makedirs(CacheLayout(path).staging(new_write_id()))
    with pytest.raises(CacheNotFoundError, match="gc"):
        read_metadata(path)


def test_manifest_that_is_not_json(cache):
    with open(manifest_file(cache), "w") as handle:
        handle.write("{ not json")
    assert "not valid JSON" in corrupt_error(cache)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(format="parquet"), "not a beam_shards manifest"),
    (lambda d: d.pop("format"), "not a beam_shards manifest"),
    (lambda d: d.update(format_version=6), "format version 6; this beam_shards reads versions 1 to 5 (upgrade"),
    (lambda d: d.update(format_version="1"), "format version '1'"),
    (lambda d: d.pop("format_version"), "format version None"),
])
def test_unknown_format_or_version(cache, change, message):
    edit(cache, change)
    assert message in corrupt_error(cache)


@pytest.mark.parametrize("field", ["write_id", "features", "schema_fingerprint", "num_rows",
                                   "compression", "writer", "metadata"])
def test_each_required_field(cache, field):
    edit(cache, lambda d: d.pop(field))
    assert f"lacks the field(s) {field}" in corrupt_error(cache)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(compression="gzip"), "unknown compression 'gzip'"),
    (lambda d: d.update(metadata=[1]), "must be JSON objects"),
    (lambda d: d.update(writer="me"), "must be JSON objects"),
    (lambda d: d.update(column_types="small"), "has column types 'small'; they are one of ('large', 'hf')"),
    (lambda d: d.update(column_types=["hf"]), "has column types ['hf']"),
])
def test_fields_of_the_wrong_kind(cache, change, message):
    edit(cache, change)
    assert message in corrupt_error(cache)


def test_a_newer_format_asks_for_an_upgrade_and_not_to_move_the_file_aside(cache):
    edit(cache, lambda d: d.update(format_version=6))
    with pytest.raises(NewerFormatError) as info:
        read_metadata(cache)
    assert "format version 6; this beam_shards reads versions 1 to 5 (upgrade beam_shards" in str(info.value)
    assert "move it aside" not in str(info.value), "a newer format is not damage"


def test_a_format_3_header_naming_other_column_types_than_large_is_refused(cache):
    # Format 3's readers ignore the field and read its shards as "large": no reader may read them otherwise.
    with open(manifest_file(cache)) as handle:
        header = json.load(handle)
    save(cache, {**header, "format_version": 3})
    assert "has format version 3, whose shards are stored in 'large' column types, but names 'hf'" in corrupt_error(
        cache)


def test_a_format_4_header_without_its_column_types_is_refused(cache):
    with open(manifest_file(cache)) as handle:
        header = json.load(handle)
    del header["column_types"]
    save(cache, header)
    assert "has column types None; they are one of ('large', 'hf')" in corrupt_error(cache)


def test_edited_fingerprint(cache):
    edit(cache, lambda d: d.update(schema_fingerprint="0" * 64))
    assert "fingerprint" in corrupt_error(cache) and "edited" in corrupt_error(cache)


def test_edited_features_no_longer_match_the_fingerprint(cache):
    edit(cache, lambda d: d["features"]["id"].update(dtype="int32"))
    assert "does not match its features" in corrupt_error(cache)


def test_invalid_features(cache):
    edit(cache, lambda d: d["features"]["id"].update(dtype="int128"))
    assert "invalid features" in corrupt_error(cache) and "int128" in corrupt_error(cache)


def test_edited_row_count(cache):
    edit(cache, lambda d: d.update(num_rows=41))
    assert "num_rows=41 but its shards hold 40 rows" in corrupt_error(cache)


@pytest.mark.parametrize("change, message", [
    (lambda d: d["shards"][1].pop("checksum"), "shard 1 lacks 'checksum'"),
    (lambda d: d["shards"][0].update(file="../elsewhere.arrow"), "invalid file name '../elsewhere.arrow'"),
    (lambda d: d["shards"][0].update(file="sub/dir.arrow"), "invalid file name"),
    (lambda d: d["shards"][2].update(num_bytes=-5), "invalid rows, bytes or checksum"),
    (lambda d: d["shards"][2].update(num_rows="10"), "invalid rows, bytes or checksum"),
    (lambda d: d["shards"].__setitem__(1, dict(d["shards"][0])), "more than once"),
    (lambda d: d.update(shards={"a": 1}), "\"shards\" must be a list"),
    (lambda d: d["shards"].__setitem__(0, "shard.arrow"), "shard 0 is not a JSON object"),
])
def test_bad_shard_entries(cache, change, message):
    edit(cache, change)
    assert message in corrupt_error(cache)


def test_missing_shard(cache):
    missing = load(cache)["shards"][1]["file"]
    os.remove(os.path.join(cache, missing))
    message = corrupt_error(cache)
    assert f"shard {missing} is missing" in message and cache in message
    backend = ArrowBackend.open(cache)  # each shard is checked when first read: an open reads none
    assert backend.get_row(0)["id"] == 0
    with pytest.raises(CorruptCacheError, match="missing"):
        backend.get_row(20)
    assert read_metadata(cache).num_shards == 3


def test_truncated_shard(cache):
    name = load(cache)["shards"][0]["file"]
    path = os.path.join(cache, name)
    size = os.path.getsize(path)
    os.truncate(path, size - 100)
    message = corrupt_error(cache)
    assert f"shard {name} has {size - 100} bytes, the manifest says {size} (truncated)" in message
    with pytest.raises(CorruptCacheError, match="truncated"):
        ArrowBackend.open(cache).get_row(0)


def test_every_damaged_shard_is_named(cache):
    names = [s["file"] for s in load(cache)["shards"]]
    os.remove(os.path.join(cache, names[0]))
    with open(os.path.join(cache, names[2]), "ab") as handle:
        handle.write(b"extra")
    message = corrupt_error(cache)
    assert f"{names[0]} is missing" in message and f"{names[2]} has" in message and "(altered)" in message


def test_file_names_and_write_ids():
    write_id = new_write_id()
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{8}", write_id)
    assert new_write_id() != write_id
    name = shard_name(write_id, 3, 12)
    assert name == f"shard-{write_id}-00003-of-00012.arrow"
    assert write_id_of_shard(name) == write_id
    assert write_id_of_shard("shard-x-00001-of-00002.arrow") is None
    assert write_id_of_shard(MANIFEST_NAME) is None
    assert CacheLayout("/data/c").staging(write_id) == f"/data/c/_staging/{write_id}"


def test_features_with_no_cache_files_still_validate(tmp_path):
    path = str(tmp_path / "empty")
    write_shards([], path, Features({"x": Value("int8")}))
    manifest = read_metadata(path)
    assert manifest.num_rows == 0 and manifest.shards == () and manifest.statistics.num_rows == 0
    with open(CacheLayout(path).version(1)) as handle:
        assert json.load(handle)["format_version"] == FORMAT_VERSION == 5
