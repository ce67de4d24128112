"""The deterministic write in one process (`ordered_in_process`) writes the shard bytes of
WriteToArrowShards(deterministic=True), skips and counts what the sink skips, and imports no Beam."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import apache_beam as beam
import pyarrow as pa
import pytest

from beam_shards import (EncodeError, Features, ShardedDataset, TooManyBadError, Value, WriteToArrowShards,
                         read_metadata)
from beam_shards.beam import ordered_in_process
from beam_shards.beam.ordered_in_process import write_in_process
from beam_shards.shards import EncodedRows, WriterOptions

from _support import options
from test_deterministic import FEATURES, _pairs, shard_digests

pytestmark = pytest.mark.timeout(300)

WRITE = {"shard_size_bytes": 20_000, "batch_size": 64}


def _with_bad_and_batches(seed: int) -> list:
    """`_pairs` with a few rows that do not fit, and some rows as encoded batches (as the pipelines give them)."""
    pairs = _pairs(seed)
    pairs += [((f"file-{f}", 1000 + f), {"file": f"file-{f}", "position": "not a number", "text": "bad"})
              for f in range(3)]
    batch = pa.table({"file": ["file-9"] * 300, "position": list(range(300)), "text": ["y" * 40] * 300})
    pairs.append((("file-9", 0), EncodedRows(FEATURES.encode_batch(batch))))
    return pairs


def _beam_write(path: str, pairs: list, **kwargs) -> None:
    with beam.Pipeline(options=options()) as p:
        _ = (p | beam.Create(pairs, reshuffle=True)
             | WriteToArrowShards(path, FEATURES, deterministic=True, **WRITE, **kwargs))


def test_the_same_shard_bytes_as_the_sink_on_a_runner_bad_rows_skipped_alike(tmp_path):
    beam_path, local_path = str(tmp_path / "beam"), str(tmp_path / "local")
    _beam_write(beam_path, _with_bad_and_batches(0), on_bad="skip", max_bad=10)
    written = write_in_process(_with_bad_and_batches(1), local_path, FEATURES, WriterOptions(**WRITE), on_bad="skip",
                               max_bad=10)
    assert len(shard_digests(beam_path)) > 3, "the test should span several shards"
    assert shard_digests(local_path) == shard_digests(beam_path)
    assert sorted(letter["key"] for letter in written.letters) == [("file-0", 1000), ("file-1", 1001),
                                                                     ("file-2", 1002)]
    assert read_metadata(local_path).metadata["bad_inputs"] == read_metadata(beam_path).metadata["bad_inputs"]
    assert not os.path.exists(os.path.join(local_path, "_staging"))


def test_a_bad_row_fails_the_write_naming_its_key_and_publishes_nothing(tmp_path):
    path = str(tmp_path / "cache")
    with pytest.raises(EncodeError, match=r"example \('file-0', 1000\), field 'position'"):
        write_in_process(_with_bad_and_batches(0), path, FEATURES, WriterOptions(**WRITE))
    assert not os.path.exists(os.path.join(path, "_metadata.json"))
    assert not os.path.exists(os.path.join(path, "_staging")) or not os.listdir(os.path.join(path, "_staging"))


def test_more_bad_rows_than_max_bad_publish_nothing(tmp_path):
    path = str(tmp_path / "cache")
    set_aside = [{"key": ("file-0", 5000), "reason": "cannot be parsed"}]
    with pytest.raises(TooManyBadError, match="4 bad input"):
        write_in_process(_with_bad_and_batches(0), path, FEATURES, WriterOptions(**WRITE), on_bad="skip", max_bad=3,
                         set_aside=set_aside)
    assert not os.path.exists(os.path.join(path, "_metadata.json"))


def test_it_imports_no_beam(tmp_path):
    script = ("import sys\n"
              "from beam_shards import Features, Value\n"
              "from beam_shards.beam.ordered_in_process import write_in_process\n"
              "from beam_shards.shards import WriterOptions\n"
              "pairs = [(('f', i), {'x': i}) for i in range(100)]\n"
              f"written = write_in_process(pairs, {str(tmp_path / 'cache')!r}, Features({{'x': Value('int64')}}),"
              " WriterOptions())\n"
              "assert written.manifest.num_rows == 100\n"
              "print(sorted(name for name in sys.modules if name.split('.')[0] == 'apache_beam'))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_encoded_batches_under_keys_of_their_own_skip_the_run_and_give_the_same_bytes(tmp_path, monkeypatch):
    def batches(seed: int) -> list:
        pairs = [((f"file-{f}", first), EncodedRows(FEATURES.encode_batch(pa.table({
            "file": [f"file-{f}"] * 50, "position": list(range(first, first + 50)),
            "text": ["z" * (i % 61) for i in range(first, first + 50)]}))))
            for f in range(2) for first in range(0, 1500, 50)]
        random.Random(seed).shuffle(pairs)
        return pairs

    beam_path, local_path = str(tmp_path / "beam"), str(tmp_path / "local")
    _beam_write(beam_path, batches(0))
    runs = []
    monkeypatch.setattr(ordered_in_process, "write_run", lambda *args: runs.append(args) or iter(()))
    write_in_process(batches(1), local_path, FEATURES, WriterOptions(**WRITE))
    assert not runs, "the run should have been skipped"
    assert len(shard_digests(beam_path)) > 3 and shard_digests(local_path) == shard_digests(beam_path)


def test_a_write_run_again_under_its_id_publishes_nothing_more_as_the_sinks(tmp_path):
    path, features, write_id = str(tmp_path / "cache"), Features({"x": Value("int64")}), "20261128T090000Z-abcdef12"
    first = write_in_process([(i, {"x": i}) for i in range(5)], path, features, WriterOptions(), write_id=write_id)
    again = write_in_process([(i, {"x": i + 10}) for i in range(5)], path, features, WriterOptions(),
                             write_id=write_id)
    assert first.manifest.version == again.manifest.version == 1
    assert [row["x"] for row in ShardedDataset(path)] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("kwargs, message", [
    ({"on_bad": "skipp"}, "on_bad must be one of"),
    ({"on_bad": "skip", "set_aside": [{"key": 1, "reason": "r"}]}, "set_aside is counted toward max_bad"),
    ({"max_bad": 3}, "max_bad limits what on_bad"),
], ids=["an on_bad of neither", "set_aside without max_bad", "max_bad without skip"])
def test_arguments_the_sink_refuses_are_refused_alike(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        write_in_process([(0, {"x": 0})], str(tmp_path / "cache"), Features({"x": Value("int64")}), WriterOptions(),
                         **kwargs)
    assert not os.path.exists(tmp_path / "cache" / "_metadata.json")


def test_keys_that_tie_in_one_place_give_one_order_through_the_run_and_without_it(tmp_path):
    # Python holds 1.0 == 1 == True, so the keys below sort by their last place; the run sorts stored bytes
    keys = [("f", 0, 1.0, "a"), ("f", 0, True, "c"), ("f", 0, 1, "b")]
    as_dicts = [(key, {"file": key[3], "position": 0, "text": ""}) for key in keys]
    as_batches = [(key, EncodedRows(FEATURES.encode_batch(pa.table({"file": [key[3]], "position": [0], "text": [""]}))))
                  for key in keys]
    orders = []
    for name, pairs in (("dicts", as_dicts), ("batches", as_batches)):
        write_in_process(pairs, str(tmp_path / name), FEATURES, WriterOptions(**WRITE))
        orders.append([row["file"] for row in ShardedDataset(str(tmp_path / name))])
    assert orders == [["a", "b", "c"], ["a", "b", "c"]]


def test_keys_python_cannot_compare_go_through_whichever_bundles_they_meet_in(tmp_path, monkeypatch):
    from beam_shards.beam import ordered_steps

    # one chunk, ("f", 0): None and a str at one place, which Python's sort refuses to compare
    pairs = [(("f", 0, text), {"file": text or "none", "position": 0, "text": ""}) for text in ("b", None, "a")] * 30
    expected = ["none"] * 30 + ["a"] * 30 + ["b"] * 30  # by their stored bytes: None's type before a str's
    write_in_process(pairs, str(tmp_path / "local"), FEATURES, WriterOptions(**WRITE))
    _beam_write(str(tmp_path / "one_run"), pairs)
    monkeypatch.setattr(ordered_steps, "RUN_BYTES", 1)  # a run an element: the keys meet only in the chunk
    runs, real_run = [], ordered_steps.write_run
    monkeypatch.setattr(ordered_steps, "write_run", lambda runs_writer, triples, *rest: runs.append(len(triples))
                        or real_run(runs_writer, triples, *rest))
    _beam_write(str(tmp_path / "runs"), pairs)
    assert len(runs) == len(pairs) and set(runs) == {1}, "each element should have been a run of its own"
    for name in ("local", "one_run", "runs"):
        assert [row["file"] for row in ShardedDataset(str(tmp_path / name))] == expected, name
    assert shard_digests(str(tmp_path / "runs")) == shard_digests(str(tmp_path / "local"))
