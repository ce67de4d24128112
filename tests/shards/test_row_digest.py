"""The canonical row digest of deduplication: equal encoded rows give equal digests, any difference another."""

from __future__ import annotations

import hashlib
import random

import pyarrow as pa
import pytest

from beam_shards.shards.row_digest import DIGEST_BYTES, row_digests

SCHEMA = pa.schema([
    ("n", pa.int64()), ("s", pa.string()), ("b", pa.large_binary()), ("l", pa.list_(pa.string())),
    ("f", pa.list_(pa.float32(), 2)), ("st", pa.struct([("x", pa.binary()), ("y", pa.bool_())])),
    ("t", pa.timestamp("ns")), ("d", pa.float64()),
])
ROW = {"n": 1, "s": "ab", "b": b"\x00", "l": ["x", None], "f": [1.0, 2.0], "st": {"x": b"q", "y": True}, "t": 5,
       "d": 0.5}


def _digest(row: dict, schema: pa.Schema = SCHEMA) -> bytes:
    return row_digests(pa.Table.from_pylist([row], schema))[0]


def test_the_encoding_is_the_documented_one():
    table = pa.table({"n": pa.array([7, None], pa.int32()), "s": pa.array(["hé", ""]), "q": [[1, 2], None]},
                     schema=pa.schema([("n", pa.int32()), ("s", pa.string()), ("q", pa.list_(pa.uint8()))]))
    first = (b"\x01" + (7).to_bytes(4, "little") + b"\x01" + _sha("hé".encode()) + b"\x01"
             + _sha(b"\x01\x01\x01\x02"))
    second = b"\x00" + bytes(4) + b"\x01" + _sha(b"") + b"\x00" + bytes(32)
    assert row_digests(table) == [_sha(data)[:DIGEST_BYTES] for data in (first, second)]
    nested = pa.table({"f": pa.array([[1, None]], pa.list_(pa.int16(), 2)),
                       "st": pa.array([{"a": True, "b": None}], pa.struct([("a", pa.bool_()), ("b", pa.int8())])),
                       "fs": pa.array([[b"ab", None]], pa.list_(pa.binary(2), 2))})
    cells = (b"\x01" + b"\x01\x00" + b"\x01\x00\x00\x00"  # a fixed-size list of ints: tags, then values
             + b"\x01" + b"\x01\x01" + b"\x00\x00"
             + b"\x01" + b"\x01ab" + b"\x00\x00\x00")  # of other items: their cells
    assert row_digests(nested) == [_sha(cells)[:DIGEST_BYTES]]


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def test_equal_rows_give_equal_digests_and_any_changed_value_another():
    base = _digest(ROW)
    assert _digest(dict(ROW)) == base and len(base) == DIGEST_BYTES
    changes = [("n", 2), ("n", None), ("s", "a"), ("s", None), ("s", ""), ("b", b""), ("b", None), ("l", ["x"]),
               ("l", ["x", ""]), ("l", []), ("l", None), ("l", ["x", None, None]), ("f", [1.0, -2.0]), ("f", None),
               ("st", {"x": None, "y": True}), ("st", {"x": b"q", "y": False}), ("st", None), ("t", 6), ("d", -0.5)]
    digests = {base} | {_digest({**ROW, name: value}) for name, value in changes}
    assert len(digests) == len(changes) + 1


def test_null_empty_and_bytes_moved_between_columns_differ():
    schema = pa.schema([("a", pa.string()), ("b", pa.string())])
    rows = [{"a": "ab", "b": "c"}, {"a": "a", "b": "bc"}, {"a": "abc", "b": ""}, {"a": "abc", "b": None},
            {"a": "", "b": "abc"}, {"a": None, "b": "abc"}, {"a": None, "b": None}, {"a": "", "b": ""}]
    assert len({_digest(row, schema) for row in rows}) == len(rows)
    lists = pa.schema([("a", pa.list_(pa.int8())), ("b", pa.list_(pa.int8()))])
    assert _digest({"a": [1, 2], "b": [3]}, lists) != _digest({"a": [1], "b": [2, 3]}, lists)


def test_floats_are_compared_by_bit_pattern():
    schema = pa.schema([("x", pa.float64())])
    assert _digest({"x": 0.0}, schema) != _digest({"x": -0.0}, schema)
    assert _digest({"x": float("nan")}, schema) == _digest({"x": float("nan")}, schema)


def test_the_column_wise_digest_of_a_table_is_each_row_s_own_whatever_its_slices_and_chunks():
    rng = random.Random(3)
    pool = {name: [ROW[name], None] + [{**ROW, "n": 9, "s": "", "b": b"", "l": [], "f": [0.0, -0.0], "t": 0,
                                         "st": {"x": None, "y": None}, "d": float("inf")}[name]] for name in ROW}
    rows = [{name: rng.choice(values) for name, values in pool.items()} for _ in range(60)]
    table = pa.Table.from_pylist(rows, SCHEMA)
    digests = row_digests(table)
    assert digests == [_digest(row) for row in rows]
    chunked = pa.concat_tables([table.slice(0, 7), table.slice(7, 30), table.slice(37)])
    assert row_digests(chunked) == digests
    assert row_digests(table.slice(5, 11)) == digests[5:16]
    assert row_digests(table.to_batches()[0].slice(3, 4)) == digests[3:7]
    same = {d for d, row in zip(digests, rows) if row == rows[0]}
    assert same == {digests[0]}


def test_the_digest_over_named_columns_ignores_the_others():
    other = {**ROW, "s": "other", "b": None}
    assert _digest(ROW) != _digest(other)
    table = pa.Table.from_pylist([ROW, other], SCHEMA)
    by_some = row_digests(table, ["n", "l"])
    assert by_some[0] == by_some[1]
    assert row_digests(table, ["l", "n"]) != by_some  # the columns' order is the encoding's


def test_unknown_columns_and_types_are_named():
    table = pa.Table.from_pylist([ROW], SCHEMA)
    with pytest.raises(KeyError, match="'nope'.*'n', 's'"):
        row_digests(table, ["nope"])
    union = pa.UnionArray.from_sparse(pa.array([0], pa.int8()), [pa.array([1]), pa.array(["a"])])
    with pytest.raises(TypeError, match="union"):
        row_digests(pa.table({"u": union}))


def test_32_and_64_bit_offsets_make_the_same_digests():
    small = pa.table({"s": pa.array(["a", None, ""]), "l": pa.array([[1], [], None], pa.list_(pa.int8()))})
    large = small.cast(pa.schema([("s", pa.large_string()), ("l", pa.large_list(pa.int8()))]))
    assert row_digests(small) == row_digests(large) and len(set(row_digests(small))) == 3
