"""Shard sizes do not follow the runner's bundles: small staged shards are merged before publish,
and `beam-shards compact` merges the small shards of a published cache into a new version."""

from __future__ import annotations

import collections
import dataclasses
import os
import random
import signal
import subprocess
import sys

import apache_beam as beam
import pytest

from beam_shards import Features, Value, WriteToArrowShards, read_metadata, verify, write_shards
from beam_shards.beam import staging
from beam_shards.cli.commands import main
from beam_shards.errors import PublishError
from beam_shards.format.catalog import list_versions
from beam_shards.read.backend import ArrowBackend
from beam_shards.shards import merge
from beam_shards.shards.merge import is_small, plan_bins
from beam_shards.shards.writer import ShardWriter
from beam_shards.versions.compaction import compact

from _paths import SCRIPTS
from _reliability import assert_clean_cache
from _support import clean_up, options

FEATURES = Features({"id": Value("int64"), "text": Value("string")})
MULTI_THREADED = ("--runner=FnApiRunner", "--direct_num_workers=8", "--direct_running_mode=multi_threading")


def _row(i: int) -> dict:
    return {"id": i, "text": "x" * 100}


def _ids(path) -> list[int]:
    backend = ArrowBackend.open(str(path))
    return backend.slice(0, backend.num_rows).column("id").to_pylist()


def _write(out, num_rows: int, *args, parts: int = 40, transform=None, **sink_args):
    per_part = num_rows // parts

    def rows(part):
        return [_row(i) for i in range(part * per_part, (part + 1) * per_part)]

    with beam.Pipeline(options=options(*args)) as p:
        examples = p | beam.Create(range(parts), reshuffle=True) | beam.FlatMap(rows)
        if transform is not None:
            examples = examples | transform
        examples | WriteToArrowShards(str(out), FEATURES, **sink_args)
    return read_metadata(str(out))


def _assert_sizes(manifest, target: int) -> None:
    small = [s.num_bytes for s in manifest.shards if is_small(s.num_bytes, target)]
    assert len(small) <= 1, f"shards under half of {target}: {small}"


def _assert_exactly_once(out, expected) -> None:
    ids = _ids(out)
    assert collections.Counter(ids) == collections.Counter(expected)
    assert verify(str(out)).ok
    assert_clean_cache(str(out))


# planning -------------------------------------------------------------------------

@pytest.mark.parametrize("keep_order", [False, True])
def test_plan_covers_every_shard_once_and_leaves_at_most_one_small_bin(keep_order):
    rng = random.Random(0)
    for _ in range(500):
        target = rng.randint(1, 1000)
        sizes = [rng.randint(1, 2 * target) if rng.random() < 0.2 else rng.randint(1, target // 2 + 1)
                 for _ in range(rng.randint(0, 60))]
        overhead = rng.choice([0, min(sizes or [0]) // 2])
        bins = plan_bins(sizes, target, keep_order=keep_order, overhead=overhead)
        assert sorted(i for b in bins for i in b) == list(range(len(sizes)))
        assert all(b == sorted(b) for b in bins)
        totals = [overhead + sum(sizes[i] - overhead for i in b) for b in bins]
        assert sum(is_small(t, target) for t in totals) <= 1, (sizes, target, bins)
        for b, t in zip(bins, totals):
            # A bin fits the target, except (keeping order) a run under half that took in the next shard.
            assert len(b) == 1 or t <= target or keep_order and is_small(t - sizes[b[-1]] + overhead, target)
        assert bins == plan_bins(list(sizes), target, keep_order=keep_order, overhead=overhead)
        if keep_order:
            assert [i for b in bins for i in b] == list(range(len(sizes)))


def test_plan_respects_the_row_cap():
    bins = plan_bins([10] * 10, 1000, rows=[3] * 10, max_rows=7)
    assert bins == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert plan_bins([10, 10, 10], 1000, rows=[4, 1, 1], max_rows=7) == [[0], [1, 2]]
    assert plan_bins([10] * 4, 1000, keep_order=True, rows=[3] * 4, max_rows=7) == [[0, 1], [2, 3]]


def test_plan_counts_the_file_overhead_once_per_bin():
    assert plan_bins([45, 45, 45, 45], 100) == [[0, 1], [2, 3]]
    assert plan_bins([45, 45, 45, 45], 100, overhead=40) == [[0, 1, 2, 3]]  # 40 + 4 * 5 <= 100


def test_plan_leaves_large_shards_alone():
    assert plan_bins([100, 100, 50], 100) == [[0], [1], [2]]
    assert plan_bins([10, 20, 30], 100) == [[0, 1, 2]]
    assert plan_bins([], 100) == []


# the sink ---------------------------------------------------------------------------

@pytest.mark.slow
def test_eight_threads_with_a_large_target_give_one_shard(tmp_path):
    out = tmp_path / "cache"
    manifest = _write(out, 10_000, *MULTI_THREADED, shard_size_bytes=64 << 20)
    assert manifest.num_shards == 1
    _assert_exactly_once(out, range(10_000))


@pytest.mark.parametrize("num_rows", [6_000, 30_000])
def test_small_target_over_many_bundles_leaves_at_most_one_small_shard(tmp_path, monkeypatch, num_rows):
    out = tmp_path / "cache"
    target = 200_000
    copied = _stage_small_shards(monkeypatch, None)
    manifest = _write(out, num_rows, *MULTI_THREADED, parts=60, shard_size_bytes=target)
    if num_rows == 6_000:  # 8 bundles of about 90 KB each
        assert copied, "shards must have been merged"
    _assert_sizes(manifest, target)
    assert max(s.num_bytes for s in manifest.shards) <= target
    _assert_exactly_once(out, range(num_rows))


def _stage_small_shards(monkeypatch, staged_size: int | None) -> list[int]:
    """Makes bundles stage shards of `staged_size` bytes (None: as they would), as many small
    bundles would (runners in this process put a whole small input in few bundles); returns a
    list that grows by one per record batch a merge copies."""
    real = staging.ShardWriter
    if staged_size is not None:
        monkeypatch.setattr(staging, "ShardWriter", lambda features, open_shard, options, *rest: real(
            features, open_shard, dataclasses.replace(options, shard_size_bytes=staged_size), *rest))
    copied = []
    original = ShardWriter.write_batch

    def counting_write_batch(self, batch):
        copied.append(batch.num_rows)
        original(self, batch)

    monkeypatch.setattr(ShardWriter, "write_batch", counting_write_batch)
    return copied


@pytest.mark.slow
def test_bundle_repeat_during_the_merge_writes_once(tmp_path, monkeypatch):
    out = tmp_path / "cache"
    target = 50_000
    copied = _stage_small_shards(monkeypatch, 5_000)
    manifest = _write(out, 6_000, "--direct_runner_bundle_repeat=1", parts=30, shard_size_bytes=target)
    assert copied, "shards must have been merged"
    _assert_sizes(manifest, target)
    _assert_exactly_once(out, range(6_000))


@pytest.mark.slow
def test_merge_retried_after_a_failure_midway_writes_once(tmp_path, monkeypatch):
    out = tmp_path / "cache"
    target = 50_000
    copied = _stage_small_shards(monkeypatch, 5_000)
    fired = []
    counting = ShardWriter.write_batch

    def failing_write_batch(self, batch):
        counting(self, batch)
        if len(copied) == 3 and not fired:  # a merge fails after copying batches; the runner retries it
            fired.append(True)
            raise RuntimeError("injected failure inside the merge")

    monkeypatch.setattr(ShardWriter, "write_batch", failing_write_batch)
    manifest = _write(out, 6_000, "--runner=BundleBasedDirectRunner", parts=30, shard_size_bytes=target)
    assert fired, "the injected failure must have fired"
    _assert_sizes(manifest, target)
    _assert_exactly_once(out, range(6_000))


# compact ------------------------------------------------------------------------------

def test_compact_merges_500_tiny_shards_into_a_new_version(tmp_path, capsys):
    out = str(tmp_path / "cache")
    before = write_shards((_row(i) for i in range(500)), out, FEATURES, max_rows_per_shard=1,
                          metadata={"source": "tiny"})
    assert before.num_shards == 500
    assert main(["compact", out, "--shard_size", "20KB"]) == 0
    assert "into version 2" in capsys.readouterr().out
    after = read_metadata(out)
    assert after.version == 2 and after.metadata == {"source": "tiny"}
    assert 1 < after.num_shards < 20
    _assert_sizes(after, 20 << 10)
    assert _ids(out) == list(range(500)), "rows keep their order"
    assert verify(out).ok
    old = ArrowBackend.open(out, version=1)
    assert old.num_rows == 500 and old.slice(0, 500).column("id").to_pylist() == list(range(500))
    assert [m.version for m in list_versions(out)] == [1, 2]
    assert not os.path.exists(os.path.join(out, "_staging"))


def test_compact_of_a_compact_cache_publishes_nothing(tmp_path, capsys):
    out = str(tmp_path / "cache")
    write_shards((_row(i) for i in range(100)), out, FEATURES)
    old, new = compact(out, 1 << 20)
    assert new is None and read_metadata(out).version == 1
    assert main(["compact", out]) == 0
    assert "nothing to compact" in capsys.readouterr().out


def test_compact_keeps_compression(tmp_path):
    out = str(tmp_path / "cache")
    write_shards((_row(i) for i in range(300)), out, FEATURES, max_rows_per_shard=7, compression="zstd")
    _, new = compact(out, 64 << 10)
    assert new.compression == "zstd" and new.num_shards == 1
    assert _ids(out) == list(range(300)) and verify(out).ok


@pytest.mark.parametrize("text", ["0", "abc", "12XB", ""])
def test_compact_refuses_a_bad_size(tmp_path, text, capsys):
    with pytest.raises(SystemExit):
        main(["compact", str(tmp_path), "--shard_size", text])


# SIGKILL ------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [1, 7])
def test_sigkill_during_the_merge_publishes_nothing_and_a_rerun_writes_once(tmp_path, monkeypatch, kill_after):
    out = str(tmp_path / "cache")
    write_shards((_row(i) for i in range(10_000, 10_100)), out, FEATURES)
    script = os.path.join(SCRIPTS, "kill_in_merge.py")
    run = subprocess.run([sys.executable, script, out, str(kill_after)], capture_output=True, text=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stderr[-3000:]
    assert os.listdir(os.path.join(out, "_staging")), "the killed write must have staged files"
    assert read_metadata(out).version == 1 and sorted(_ids(out)) == list(range(10_000, 10_100))
    assert verify(out).ok
    clean_up(out)
    assert_clean_cache(out)
    copied = _stage_small_shards(monkeypatch, 5_000)
    manifest = _write(out, 6_000, parts=30, shard_size_bytes=50_000)
    assert copied and manifest.version == 2
    _assert_sizes(manifest, 50_000)
    _assert_exactly_once(out, range(6_000))


def test_compact_refuses_a_damaged_shard_and_publishes_nothing(tmp_path, capsys):
    out = str(tmp_path / "cache")
    before = write_shards((_row(i) for i in range(50)), out, FEATURES, max_rows_per_shard=5)
    damaged = os.path.join(out, before.shards[3].file)
    with open(damaged, "r+b") as handle:  # a byte of a value: the Arrow structure stays valid
        data = handle.read()
        handle.seek(data.index(b"x" * 100) + 10)
        handle.write(b"y")
    assert main(["compact", out, "--shard_size", "1MB"]) == 1
    assert "checksum" in capsys.readouterr().err
    assert read_metadata(out).version == 1 and [m.version for m in list_versions(out)] == [1]
    assert not os.path.exists(os.path.join(out, "_staging"))


def test_compact_publishes_nothing_if_another_write_published_meanwhile(tmp_path, monkeypatch):
    out = str(tmp_path / "cache")
    write_shards((_row(i) for i in range(50)), out, FEATURES, max_rows_per_shard=5)
    real = merge.merge_shards

    def merge_then_race(*args, **kwargs):
        shard = real(*args, **kwargs)
        if len(list_versions(out)) == 1:
            write_shards((_row(i) for i in range(100, 110)), out, FEATURES, retention=None)
        return shard

    monkeypatch.setattr(merge, "merge_shards", merge_then_race)
    with pytest.raises(PublishError, match="was published since"):
        compact(out, 1 << 20)
    latest = read_metadata(out)
    assert latest.version == 2 and sorted(_ids(out)) == list(range(100, 110))
    assert not os.path.exists(os.path.join(out, "_staging"))
    assert verify(out).ok


# object stores ----------------------------------------------------------------------

def test_merge_and_compact_on_an_object_store(tmp_path, monkeypatch):
    import fake_object_store

    root = tmp_path / "bucket"
    root.mkdir()
    monkeypatch.setenv(fake_object_store.ROOT_ENV, str(root))
    path = "fakeobj://cache"
    copied = _stage_small_shards(monkeypatch, 5_000)
    manifest = _write(path, 2_000, parts=10, shard_size_bytes=50_000)
    assert copied, "shards must have been merged"
    _assert_sizes(manifest, 50_000)
    assert sorted(_ids(path)) == list(range(2_000)) and verify(path).ok
    objects = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]
    assert not [o for o in objects if "_staging" in o], objects
    monkeypatch.undo()
    monkeypatch.setenv(fake_object_store.ROOT_ENV, str(root))
    write_shards((_row(i) for i in range(100)), path, FEATURES, max_rows_per_shard=3)
    _, new = compact(path, 20_000)
    assert new.version == 3 and new.num_shards < 10
    assert _ids(path) == list(range(100)) and verify(path).ok


def test_compact_lists_large_shards_again_without_copying(tmp_path):
    out = str(tmp_path / "cache")
    write_shards((_row(i) for i in range(0, 300)), out, FEATURES, shard_size_bytes=20_000, retention=None)
    write_shards((_row(i) for i in range(300, 330)), out, FEATURES, mode="append", max_rows_per_shard=3,
                 retention=None)
    write_shards((_row(i) for i in range(330, 600)), out, FEATURES, mode="append", shard_size_bytes=20_000,
                 retention=None)
    before = read_metadata(out)
    _, new = compact(out, 20_000)
    large = [s.file for s in before.shards if not is_small(s.num_bytes, 20_000)]
    assert [s.file for s in new.shards if s.file in large] == large, "large shards are listed again, in order"
    assert new.num_shards < before.num_shards
    _assert_sizes(new, 20_000)
    assert _ids(out) == list(range(600)) and verify(out).ok
    assert ArrowBackend.open(out, version=before.version).num_rows == 600
    clean_up(out)
    assert verify(out).ok and read_metadata(out, version=before.version).num_rows == 600


def test_compact_failing_midway_publishes_nothing_and_leaves_no_staging(tmp_path, monkeypatch):
    out = str(tmp_path / "cache")
    write_shards((_row(i) for i in range(60)), out, FEATURES, max_rows_per_shard=2)
    real, calls = merge.merge_shards, []

    def fail_on_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(merge, "merge_shards", fail_on_second)
    with pytest.raises(OSError, match="injected"):
        compact(out, 4_000)  # shards of 2 rows, about 1.3 kB each with their schema: bins of 3
    assert len(calls) == 2 and read_metadata(out).version == 1 and _ids(out) == list(range(60))
    assert_clean_cache(out)


def _one_huge_row(example: dict) -> dict:
    return {**example, "text": "y" * 300_000} if example["id"] == 777 else example


def test_one_oversized_row_among_small_shards_keeps_a_shard_of_its_own(tmp_path, monkeypatch):
    """The writer gives a row larger than the target a shard of its own; the merge leaves that
    shard alone (it is no small shard) and packs the small ones around it."""
    out = tmp_path / "cache"
    target = 100_000
    copied = _stage_small_shards(monkeypatch, 8_000)
    manifest = _write(out, 6_000, parts=30, transform=beam.Map(_one_huge_row), shard_size_bytes=target)
    assert copied, "shards must have been merged"
    huge = [s for s in manifest.shards if s.num_bytes > target]
    assert len(huge) == 1 and huge[0].num_rows == 1, [(s.num_rows, s.num_bytes) for s in manifest.shards]
    _assert_sizes(manifest, target)
    _assert_exactly_once(out, range(6_000))
    print(f"\nMERGE one oversized row: {manifest.num_shards} shards, sizes "
          f"{sorted(s.num_bytes for s in manifest.shards)}")
