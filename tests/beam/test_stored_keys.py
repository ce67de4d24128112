"""A deterministic write's keys are stored in a plain encoding: a run shard planted in the staging
runs no code, and keys of other types are refused by name at the first element."""

from __future__ import annotations

import dataclasses
import os
import pickle

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest

from beam_shards import CorruptCacheError, Features, ShardedDataset, Value, WriteToArrowShards
from beam_shards.beam import ordered
from beam_shards.shards.options import WrittenShard
from beam_shards.shards.shard_file import file_checksum

from _support import options

pytestmark = pytest.mark.timeout(120)

FEATURES = Features({"file": Value("string"), "position": Value("int64")})


def _pairs(n: int = 200) -> list:
    return [(("data.csv", p), {"file": "data.csv", "position": p}) for p in range(n)]


def _write(path: str, pairs: list) -> None:
    with beam.Pipeline(options=options()) as p:
        _ = p | beam.Create(pairs) | WriteToArrowShards(path, FEATURES, deterministic=True, batch_size=16)


class _Planted:
    """Unpickled, it creates the marker file: the code an attacker plants."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, "w")


def _forge(shard: WrittenShard, marker: str) -> WrittenShard:
    """Rewrites a run shard in place with every stored key a pickle of planted code (same rows and
    batches), and returns the shard with the new size and checksum, as a forged CRC would match."""
    with open(shard.path, "rb") as handle:
        reader = pa.ipc.open_file(pa.BufferReader(handle.read()))
    index = reader.schema.get_field_index(ordered.KEY_COLUMN)
    payload = pa.scalar(pickle.dumps(_Planted(marker)), reader.schema.field(index).type)
    with pa.ipc.new_file(shard.path, reader.schema) as writer:
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            columns = list(batch.columns)
            columns[index] = pa.array([payload.as_py()] * batch.num_rows, payload.type)
            writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=reader.schema))
    checksum, size = file_checksum(shard.path)
    return dataclasses.replace(shard, num_bytes=size, checksum=checksum)


def test_a_run_shard_forged_in_the_staging_runs_no_code_and_publishes_nothing(tmp_path, monkeypatch):
    marker = str(tmp_path / "planted-code-ran")
    path = str(tmp_path / "cache")
    forged: dict[str, WrittenShard] = {}
    real = ordered.read_piece

    def forging(piece, features, run_options):
        shard = piece[0]
        if shard.path not in forged:
            forged[shard.path] = _forge(shard, marker)
        return real((forged[shard.path], *piece[1:]), features, run_options)

    monkeypatch.setattr(ordered, "read_piece", forging)
    with pytest.raises(CorruptCacheError, match="holds no key a deterministic write stores") as raised:
        _write(path, _pairs())
    assert forged, "the forgery must have fired"
    assert not os.path.exists(marker), "a stored key was unpickled: the planted code ran"
    assert any(os.path.basename(run) in str(raised.value) for run in forged), "the error names the run shard"
    assert not os.path.exists(os.path.join(path, "_metadata.json"))


def test_a_forged_key_column_is_refused_when_a_chunk_is_sorted(tmp_path):
    marker = str(tmp_path / "planted-code-ran")
    planted = pickle.dumps(_Planted(marker))
    table = pa.table({"v": [1, 2], ordered.KEY_COLUMN: pa.array([planted, planted], pa.large_binary())})
    with pytest.raises(CorruptCacheError, match="row 0 of the chunk holds no key"):
        ordered.in_key_order(table)
    assert not os.path.exists(marker)


def _staged_files(path: str) -> list[str]:
    return [name for _, _, names in os.walk(path) for name in names if name.endswith(".arrow")]


@pytest.mark.parametrize("key, words", [
    (np.int64(3), ["numpy.int64", "np.int64(3)", ".item()"]),
    (("data.csv", [1, 2]), ["a list at key[1]", "('data.csv', [1, 2])", "use a tuple"]),
    (frozenset({"a"}), ["is a frozenset", "frozenset({'a'})"]),
    (("data.csv", 1.5j), ["a complex at key[1]"]),
], ids=["numpy scalar", "list in a tuple", "frozenset", "complex"])
def test_a_key_of_another_type_is_refused_by_name_at_the_first_element(tmp_path, key, words):
    path = str(tmp_path / "cache")
    with pytest.raises(TypeError, match="deterministic write keys are tuples of str, int, float, bytes, bool and "
                                        "None") as raised:
        _write(path, [(key, {"file": "data.csv", "position": 0})] + _pairs(3))
    for word in words:
        assert word in str(raised.value)
    assert not _staged_files(path) and not os.path.exists(os.path.join(path, "_metadata.json"))


def test_keys_of_every_plain_type_are_written_in_key_order(tmp_path):
    path = str(tmp_path / "cache")
    keys = [("b", -1, 2.5, b"\x00", True, None), ("a", 3), ("a", 2**70), ("a", -5, (b"x", ("nested",)))]
    pairs = [(key, {"file": repr(key), "position": n}) for n, key in enumerate(keys)]
    _write(path, pairs)
    assert [row["file"] for row in ShardedDataset(path)] == [repr(key) for key in sorted(keys)]



def test_a_column_decoder_reads_every_row_as_decode_keyed_row_does_damaged_rows_included(monkeypatch):
    from beam_shards.beam import keys

    column = (keys.encode_keyed_rows(("a.jsonl", 1.5, -3), 300) + keys.encode_keyed_rows(("a.jsonl", 2), 2)
              + keys.encode_keyed_rows(7, 2))
    whole = []
    real = keys.decode_keyed_row
    monkeypatch.setattr(keys, "decode_keyed_row", lambda data: whole.append(data) or real(data))
    decode = keys.KeyedRowDecoder()
    assert [decode(data) for data in column] == [real(data) for data in column]
    assert len(whole) == 3, "each key decoded once, then only the rows' numbers"
    first, second = column[0], column[1]
    prefix, tail = first[:-5], first[-4:]  # row 0 is one byte (0x13), then the pair's end and the kinds
    damaged_rows = [prefix + b"\x14\x00\x01\x00\x00\x00" + tail,  # row 0 with a digit of its own
                    prefix + b"\x15" + tail,  # an infinity for a row
                    prefix + b"\x14\x00\x01\x01\x00\x00" + tail[:-1] + b"\x02",  # a float's kind for row 1
                    second[:-2]]
    for damaged in damaged_rows:
        decode = keys.KeyedRowDecoder()
        decode(first)
        with pytest.raises(ValueError) as expected:
            real(damaged)
        with pytest.raises(ValueError) as raised:
            decode(damaged)
        assert str(raised.value) == str(expected.value)
