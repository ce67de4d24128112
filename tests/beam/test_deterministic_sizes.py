"""Shard sizes of a deterministic write follow the contract: no shard past the target, at most one under half."""

from __future__ import annotations

import random

import apache_beam as beam
import pytest

from beam_shards import Features, Value, WriteToArrowShards, read_metadata
from beam_shards.read.backend import ArrowBackend
from beam_shards.shards.merge import is_small

from _support import options
from test_deterministic import shard_digests

pytestmark = pytest.mark.timeout(300)

FEATURES = Features({"file": Value("string"), "position": Value("int64"), "data": Value("binary")})


def _pairs(files: dict[str, int], row_bytes) -> list[tuple[tuple[str, int], dict]]:
    """Rows of files of `files[name]` rows, each of `row_bytes(name, position)` bytes that do not compress."""
    return [((name, p), {"file": name, "position": p,
                         "data": random.Random(f"{name} {p}").randbytes(row_bytes(name, p))})
            for name, rows in files.items() for p in range(rows)]


def _write(path: str, pairs, *runner: str, **sink_args) -> None:
    with beam.Pipeline(options=options(*runner)) as p:
        _ = p | beam.Create(pairs, reshuffle=True) | WriteToArrowShards(path, FEATURES, deterministic=True, **sink_args)


def _check_sizes(path: str, target: int, rows: int) -> list[int]:
    manifest = read_metadata(path)
    sizes = [shard.num_bytes for shard in manifest.shards]
    table = ArrowBackend.open(path).slice(0, manifest.num_rows)
    keys = list(zip(table.column("file").to_pylist(), table.column("position").to_pylist()))
    assert len(keys) == rows and keys == sorted(keys), "every row once, in key order"
    assert max(sizes) <= target, f"shards past the {target}-byte target: {sizes}"
    assert sum(is_small(size, target) for size in sizes) <= 1, f"more than one shard under half the target: {sizes}"
    return sizes


def test_rows_near_half_the_target_never_make_a_shard_past_it(tmp_path):
    """As an image folder of ~510 KB images with --shard_size 1MiB: two rows fill a shard, and each
    file's odd last row used to be merged with the next file's first shard into three rows."""
    target = 20_000
    pairs = _pairs({f"class-{c}": 5 for c in range(4)}, lambda name, p: 8_000)
    path = str(tmp_path / "cache")
    _write(path, pairs, shard_size_bytes=target)
    sizes = _check_sizes(path, target, len(pairs))
    assert len(sizes) >= 8, sizes


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_small_rows_fill_shards_across_files_and_chunks(tmp_path, compression):
    """Files whose last chunks leave small shards between full ones: each small one is split with its
    neighbour so both are over half, and the bytes do not depend on the runner."""
    target = 20_000
    pairs = _pairs({"a": 178, "b": 300, "c": 140, "d": 11, "e": 200},
                   lambda name, p: 40 + (p * 7919 + len(name)) % 90)
    runs = {}
    for name, runner in {"in-process": [], "retrying": ["--runner=BundleBasedDirectRunner"]}.items():
        path = str(tmp_path / name)
        _write(path, pairs, *runner, shard_size_bytes=target, batch_size=16, compression=compression)
        _check_sizes(path, target, len(pairs))
        runs[name] = shard_digests(path)
    assert runs["in-process"] == runs["retrying"]
    assert len(runs["in-process"]) > 4


def test_the_row_cap_comes_first(tmp_path):
    target = 20_000
    pairs = _pairs({"a": 70, "b": 45}, lambda name, p: 50)
    path = str(tmp_path / "cache")
    _write(path, pairs, shard_size_bytes=target, batch_size=8, max_rows_per_shard=30)
    manifest = read_metadata(path)
    assert max(shard.num_rows for shard in manifest.shards) <= 30
    assert manifest.num_rows == len(pairs) and max(shard.num_bytes for shard in manifest.shards) <= target
