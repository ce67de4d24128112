"""`verify`: checksums, sizes, schemas and row counts of every shard; all problems reported."""

from __future__ import annotations

import json
import os

import pytest

from beam_shards import (ArrowBackend, CacheNotFoundError, CorruptCacheError, Features, Value, VerifyReport, verify,
                         write_shards)
from beam_shards.format.layout import MANIFEST_NAME

from _reliability import listed_manifest
from _support import FEATURES, example, flip_byte


def write(path: str, n: int = 40, features: Features = FEATURES, **options) -> list[str]:
    """Writes `n` examples in shards of 10 rows; returns the shard paths."""
    make = example if features is FEATURES else (lambda i: {"x": i})
    manifest = write_shards((make(i) for i in range(n)), path, features, max_rows_per_shard=10, **options)
    return [manifest.shard_path(i) for i in range(manifest.num_shards)]


def manifest_data(path: str) -> dict:
    return listed_manifest(path)


def save_manifest(path: str, data: dict) -> None:
    with open(os.path.join(path, MANIFEST_NAME), "w") as handle:
        json.dump(data, handle)


@pytest.fixture
def cache(tmp_path):
    path = str(tmp_path / "cache")
    return path, write(path)


def test_a_sound_cache_verifies(cache):
    path, shards = cache
    seen = []
    report = verify(path, on_shard=lambda done, total: seen.append((done, total)))
    assert isinstance(report, VerifyReport)
    assert report.ok and bool(report) and report.problems == [] and report.shards_checked == 4
    assert report.manifest.num_rows == 40
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert "ok=True" in repr(report)


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_a_compressed_cache_verifies(tmp_path, compression):
    path = str(tmp_path / "cache")
    write(path, compression=compression)
    assert verify(path).ok


def test_an_empty_cache_verifies(tmp_path):
    path = str(tmp_path / "empty")
    write(path, n=0)
    report = verify(path)
    assert report.ok and report.shards_checked == 0


def test_a_flipped_byte_fails_the_checksum(cache):
    path, shards = cache
    flip_byte(shards[1], os.path.getsize(shards[1]) // 2)
    report = verify(path)
    assert not report.ok
    name = os.path.basename(shards[1])
    assert any(f"shard {name} has checksum crc32:" in p for p in report.problems)
    assert all(name in p for p in report.problems)


def test_all_problems_are_reported_not_only_the_first(cache):
    path, shards = cache
    flip_byte(shards[0], 200)
    os.remove(shards[1])
    os.truncate(shards[2], 500)
    report = verify(path)
    names = [os.path.basename(s) for s in shards]
    assert report.shards_checked == 4
    assert any(f"{names[0]} has checksum" in p for p in report.problems)
    assert f"shard {names[1]} is missing" in report.problems
    assert any(f"{names[2]} has 500 bytes" in p and "truncated" in p for p in report.problems)
    assert not any(names[3] in p for p in report.problems)


def test_a_row_count_that_does_not_match_the_footer(cache):
    path, shards = cache
    data = manifest_data(path)
    data["shards"][0]["num_rows"] += 1
    data["shards"][1]["num_rows"] -= 1
    save_manifest(path, data)
    report = verify(path)
    assert any("holds 10 rows, the manifest says 11" in p for p in report.problems)
    assert any("holds 10 rows, the manifest says 9" in p for p in report.problems)
    with pytest.raises(CorruptCacheError, match="holds 10 rows, the manifest says 11"):
        ArrowBackend.open(path).get_row(0)


def test_a_shard_of_another_schema(tmp_path, cache):
    path, shards = cache
    other = str(tmp_path / "other")
    foreign = write(other, n=10, features=Features({"x": Value("int64")}))[0]
    os.replace(foreign, shards[3])
    data = manifest_data(path)
    data["shards"][3].update(num_bytes=os.path.getsize(shards[3]),
                             checksum=manifest_data(other)["shards"][0]["checksum"])
    data["num_bytes"] = sum(shard["num_bytes"] for shard in data["shards"])
    save_manifest(path, data)
    report = verify(path)
    assert len(report.problems) == 1 and "has schema" in report.problems[0]
    with pytest.raises(CorruptCacheError, match="has schema"):
        ArrowBackend.open(path).get_row(35)


def test_a_shard_of_garbage_with_matching_size_and_checksum(cache):
    import zlib

    path, shards = cache
    garbage = b"\x00" * os.path.getsize(shards[0])
    with open(shards[0], "wb") as handle:
        handle.write(garbage)
    data = manifest_data(path)
    data["shards"][0]["checksum"] = f"crc32:{zlib.crc32(garbage):08x}"
    save_manifest(path, data)
    report = verify(path)
    assert len(report.problems) == 1 and "not a readable Arrow IPC file" in report.problems[0]


def test_a_corrupt_manifest_is_one_problem(cache):
    path, _ = cache
    data = manifest_data(path)
    data["format_version"] = 9
    save_manifest(path, data)
    report = verify(path)
    assert report.manifest is None and len(report.problems) == 1 and "format version 9" in report.problems[0]


def test_no_cache_raises(tmp_path):
    with pytest.raises(CacheNotFoundError):
        verify(str(tmp_path / "none"))
