"""WriteToArrowShards(deterministic=True): the same input gives the same rows, order and shard bytes on any runner."""

from __future__ import annotations

import hashlib
import os
import random

import apache_beam as beam
import pyarrow as pa
import pytest

from beam_shards import Features, Value, WriteToArrowShards, read_metadata
from beam_shards.beam import ordered, ordered_steps
from beam_shards.beam.keys import encode_keyed_rows
from beam_shards.read.backend import ArrowBackend
from beam_shards.storage import read_bytes

from _support import options

pytestmark = pytest.mark.timeout(300)

FEATURES = Features({"file": Value("string"), "position": Value("int64"), "text": Value("string")})
RUNNERS = {
    "in-process": [],
    "8 threads": ["--direct_running_mode=multi_threading", "--direct_num_workers=8"],
    "2 processes": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    "retrying runner": ["--runner=BundleBasedDirectRunner"],
}
# A repeated bundle is a runner setup too: its run is compared with the in-process one, counting the repeat, in
# `test_a_repeated_bundle_really_repeated_and_still_gives_the_same_bytes`.
BUNDLE_REPEAT = ["--direct_runner_bundle_repeat=1"]


def _pairs(seed: int) -> list[tuple[tuple[str, int], dict]]:
    """Rows of three files, in an order that depends on `seed` (as a runner's listing would)."""
    pairs = [((f"file-{f}", p), {"file": f"file-{f}", "position": p, "text": "x" * (p % 97)})
             for f in range(3) for p in range(700)]
    random.Random(seed).shuffle(pairs)
    return pairs


def _write(path: str, runner: list[str], seed: int, **kwargs) -> None:
    with beam.Pipeline(options=options(*runner)) as p:
        _ = (p | beam.Create(_pairs(seed), reshuffle=True)
             | WriteToArrowShards(path, FEATURES, deterministic=True, shard_size_bytes=20_000, batch_size=64,
                                  **kwargs))


def shard_digests(path: str) -> list[str]:
    manifest = read_metadata(path)
    return [hashlib.sha256(read_bytes(manifest.shard_path(i))).hexdigest() for i in range(manifest.num_shards)]


@pytest.mark.slow
def test_rows_are_in_key_order_and_shards_are_byte_identical_on_every_runner(tmp_path):
    digests = {}
    for seed, (name, runner) in enumerate(RUNNERS.items()):
        path = str(tmp_path / name.replace(" ", "_"))
        _write(path, runner, seed)
        table = ArrowBackend.open(path).slice(0, read_metadata(path).num_rows)
        keys = list(zip(table.column("file").to_pylist(), table.column("position").to_pylist()))
        assert keys == sorted(keys) and len(keys) == 2100, name
        digests[name] = shard_digests(path)
    first = digests["in-process"]
    assert len(first) > 3, "the test should span several shards"
    assert all(found == first for found in digests.values()), digests


@pytest.mark.slow
def test_many_small_runs_give_the_same_bytes_as_one(tmp_path, monkeypatch):
    pieces = []
    real = ordered_steps.WriteRunsFn._write_run

    def recording(self):
        for output in real(self):
            pieces.append(output)
            yield output

    monkeypatch.setattr(ordered_steps.WriteRunsFn, "_write_run", recording)
    _write(str(tmp_path / "one_run"), [], 0)
    one_run = len({piece[1][0].path for piece in pieces})
    pieces.clear()
    monkeypatch.setattr(ordered_steps, "RUN_BYTES", 2_000)
    _write(str(tmp_path / "small_runs"), [], 1)
    runs = {piece[1][0].path for piece in pieces}
    chunks_in_several_runs = [chunk for chunk in {p[0] for p in pieces} if sum(p[0] == chunk for p in pieces) > 1]
    assert len(runs) > 2 * one_run and chunks_in_several_runs, (one_run, len(runs))
    assert shard_digests(str(tmp_path / "one_run")) == shard_digests(str(tmp_path / "small_runs"))


def count_chunks(monkeypatch) -> list:
    """The chunks written in this process, listed as `WriteChunkFn` writes them (a repeated bundle writes some twice)."""
    calls = []
    real = ordered_steps.WriteChunkFn.process

    def counting(self, element, *args):
        calls.append(element[0])
        yield from real(self, element, *args)

    monkeypatch.setattr(ordered_steps.WriteChunkFn, "process", counting)
    return calls


@pytest.mark.slow
def test_a_repeated_bundle_really_repeated_and_still_gives_the_same_bytes(tmp_path, monkeypatch):
    calls = count_chunks(monkeypatch)
    _write(str(tmp_path / "once"), [], 0)
    once = len(calls)
    calls.clear()
    _write(str(tmp_path / "repeat"), BUNDLE_REPEAT, 1)
    assert len(calls) > once, "the bundle repeat did not fire"
    assert shard_digests(str(tmp_path / "once")) == shard_digests(str(tmp_path / "repeat"))
    assert not os.path.exists(os.path.join(tmp_path, "repeat", "_staging"))


@pytest.mark.slow
def test_chunks_are_sorted_in_64_bit_offsets_and_published_in_hugging_faces_types(tmp_path, monkeypatch):
    # A chunk is sorted whole: with 32-bit string offsets, past 2 GiB of text in a chunk the sort would fail.
    sorted_types = []
    real = ordered.in_key_order

    def recording(table: pa.Table) -> pa.Table:
        sorted_types.append(table.schema.field("text").type)
        return real(table)

    monkeypatch.setattr(ordered, "in_key_order", recording)
    path = str(tmp_path / "cache")
    _write(path, [], 0)
    assert sorted_types and set(sorted_types) == {pa.large_string()}
    assert ArrowBackend.open(path).slice(0, 1).schema.field("text").type == pa.string()
    assert read_metadata(path).column_types == "hf" and read_metadata(path).num_rows == 2100


def test_chunks_keep_key_order():
    assert ordered.chunk_of(("a", 1500), 1000) == ("a", 1) and ordered.chunk_of("k", 1000) == "k"
    assert ordered.chunk_of(("a", 1500, "a, line 1500"), 1000) == ("a", 1)
    assert ordered.chunk_of(2500, 1000) == 2 and ordered.chunk_of(("a", "b", 7), 1000) == ("a", "b", 7)
    assert ordered.chunk_of(("a", True), 1000) == ("a", True) and ordered.chunk_of(True, 1000) is True
    assert ordered.ranks([("b", 0), ("a", 2), ("a", 0), ("a", 2)]) == {("a", 0): 0, ("a", 2): 1, ("b", 0): 2}
    assert ordered.ranks([(None, 0), "a", 1, ("a", 0)]) == {1: 0, "a": 1, (None, 0): 2, ("a", 0): 3}  # by type
    keys = pa.array([encode_keyed_rows(k, 1)[0] for k in (2, 1, 2)], pa.large_binary())
    table = pa.table({"v": [1, 2, 0], ordered.KEY_COLUMN: keys})
    assert ordered.in_key_order(table).column("v").to_pylist() == [2, 0, 1]


def test_skip_leaves_a_bad_example_out_and_keeps_the_order(tmp_path):
    pairs = [(("f", p), {"file": "f", "position": p, "text": "t"}) for p in range(300)]
    pairs[150] = (("f", 150), {"file": "f", "position": "not an int", "text": "t"})
    path = str(tmp_path / "cache")
    with beam.Pipeline(options=options()) as p:
        result = (p | beam.Create(pairs, reshuffle=True)
                  | WriteToArrowShards(path, FEATURES, deterministic=True, on_bad="skip", batch_size=16))
        _ = result.bad | beam.Map(lambda letter: open(os.path.join(str(tmp_path), "bad.txt"), "a").write(
            f"{letter['key']}\n"))
    positions = ArrowBackend.open(path).slice(0, 299).column("position").to_pylist()
    assert positions == [p for p in range(300) if p != 150]
    assert open(tmp_path / "bad.txt").read() == "('f', 150)\n"


def test_examples_without_keys_are_refused_with_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"takes \(key, example\) pairs"):
        with beam.Pipeline(options=options()) as p:
            _ = (p | beam.Create([{"file": "f", "position": 1, "text": "t"}])
                 | WriteToArrowShards(str(tmp_path / "c"), FEATURES, deterministic=True))


def test_a_feature_named_as_the_key_column_is_refused_before_anything_runs(tmp_path):
    features = Features({ordered.KEY_COLUMN: Value("int64")})
    with pytest.raises(ValueError, match="rename that feature"):
        with beam.Pipeline(options=options()) as p:
            _ = p | beam.Create([((0,), {ordered.KEY_COLUMN: 1})]) | WriteToArrowShards(
                str(tmp_path / "c"), features, deterministic=True)
    assert not os.path.exists(tmp_path / "c")
