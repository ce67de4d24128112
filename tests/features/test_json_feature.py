"""The Json feature: any JSON value stored as JSON text, read back as Python values, bounded in depth."""

from __future__ import annotations

import glob
import os
import zlib

import numpy as np
import pyarrow as pa
import pytest

from beam_shards import (ArrowBackend, CorruptCacheError, EncodeError, Features, Json, Sequence, ShardedDataset, Struct, Value,
                         encode_example, write_shards)
from beam_shards.cli import main as cli_main
from beam_shards.features import MAX_DEPTH, decode_table, feature_from_dict

from _hostile import rewrite_table

MIXED = [{"a": [1, 2.5, None, True, "x"], "b": {"c": {}}}, [1, "two", [3.0]], "text", 7, -1.5, True, None, [], {}]
FEATURES = Features({"j": Json(), "many": Sequence(Json()), "rec": Struct({"id": Value("int64"), "extra": Json()})})


def rows() -> list[dict]:
    return [{"j": value, "many": [value, i], "rec": {"id": i, "extra": {"i": i, "v": value}}}
            for i, value in enumerate(MIXED)]


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_the_json_form_and_repr_round_trip():
    for feature in (Json(), Json(nullable=False)):
        assert feature_from_dict(feature.to_dict()) == feature
    assert repr(Json()) == "Json()" and repr(Json(nullable=False)) == "Json(nullable=False)"
    assert Features.from_json(FEATURES.to_json()) == FEATURES


def test_values_are_stored_as_compact_json_text_and_read_back_as_python_values():
    encoded = [encode_example(row, FEATURES) for row in rows()]
    assert encoded[0]["j"] == '{"a":[1,2.5,null,true,"x"],"b":{"c":{}}}'
    assert encoded[2]["j"] == '"text"' and encoded[6]["j"] is None, "a str is a JSON string; None is a null"
    batch = FEATURES.build_batch(encoded)
    assert batch.schema.field("j").type == pa.large_string()
    assert decode_table(batch, FEATURES) == rows()


def test_numpy_scalars_and_tuples_are_taken_as_the_json_they_equal():
    row = {"j": (np.int64(3), np.float32(0.5), np.bool_(True)), "many": [], "rec": {"id": 0, "extra": None}}
    assert encode_example(row, FEATURES)["j"] == "[3,0.5,true]"


@pytest.mark.parametrize("value, where, words", [
    (float("nan"), "j", "nan is not a JSON number"),
    ({"a": [1, float("inf")]}, "j['a'][1]", "inf is not a JSON number"),
    (b"raw", "j", "a bytes is not a JSON value"),
    ({1, 2}, "j", "a set is not a JSON value"),
    ({"ok": {3: "x"}}, "j['ok']", "key 3: JSON object keys are strings, not int"),
    ([object()], "j[0]", "a object is not a JSON value"),
    ("\ud800", "j", "cannot be stored as UTF-8"),
])
def test_a_value_that_is_not_json_is_refused_naming_the_field_and_value(value, where, words):
    with pytest.raises(EncodeError) as info:
        encode_example({"j": value, "many": [], "rec": {"id": 0, "extra": None}}, FEATURES, key="row-7")
    message = str(info.value)
    assert words in message and f"field {where!r}" in message and "row-7" in message


def test_a_value_nested_past_the_bound_is_refused_without_recursing():
    fine = nested(MAX_DEPTH)
    assert encode_example({"j": fine, "many": [], "rec": {"id": 0, "extra": None}}, FEATURES)["j"].count("[") == MAX_DEPTH
    for depth in (MAX_DEPTH + 1, 200_000):
        with pytest.raises(EncodeError, match=f"field 'j'.*more than {MAX_DEPTH} levels deep"):
            encode_example({"j": nested(depth), "many": [], "rec": {"id": 0, "extra": None}}, FEATURES)


def test_null_is_refused_where_the_json_is_not_nullable():
    features = Features({"j": Json(nullable=False)})
    with pytest.raises(EncodeError, match="None where a value is required"):
        encode_example({"j": None}, features)


def test_a_batch_of_json_text_is_taken_as_it_is_once_it_parses():
    texts = pa.array(['{"b": 1,  "a": 2}', None, '"x"', "[1, [2]]"])
    table = Features({"j": Json()}).encode_batch(pa.table({"j": texts}))
    assert table.column("j").to_pylist() == ['{"b": 1,  "a": 2}', None, '"x"', "[1, [2]]"]
    assert decode_table(table, Features({"j": Json()}))[0] == {"j": {"b": 1, "a": 2}}
    as_extension = pa.ExtensionArray.from_storage(pa.json_(), pa.array(['{"k": [1]}']))
    assert Features({"j": Json()}).encode_batch(pa.table({"j": as_extension})).column("j").to_pylist() == ['{"k": [1]}']


def test_a_batch_of_values_is_stored_as_their_json_text():
    table = pa.table({"n": pa.array([1, None, 3]), "rec": pa.array([{"a": 1, "b": [1.5]}, None, {"a": None, "b": []}])})
    features = Features({"n": Json(), "rec": Json()})
    encoded = features.encode_batch(table)
    assert encoded.column("n").to_pylist() == ["1", None, "3"]
    assert decode_table(encoded, features)[2] == {"n": 3, "rec": {"a": None, "b": []}}


@pytest.mark.parametrize("column, row, words", [
    (pa.array(['{"a": 1}', '{"a":', None]), 1, "holds JSON text; this is not JSON"),
    (pa.array(["1", "NaN"]), 1, "NaN is not a JSON number"),
    (pa.array(["[]", "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)]), 1, f"at most {MAX_DEPTH} are read"),
    (pa.array([1.0, float("nan")]), 1, "nan is not a JSON number"),
    (pa.array([b"\x00"]), None, "a large_binary column cannot hold Json() values"),
])
def test_a_batch_that_is_not_json_is_refused_naming_the_row(column, row, words):
    with pytest.raises(EncodeError) as info:
        Features({"j": Json()}).encode_batch(pa.table({"j": column.cast(pa.large_binary()) if column.type == pa.binary()
                                                       else column}))
    assert words in str(info.value) and "field 'j'" in str(info.value)
    if row is not None:
        assert f"row {row} of a batch" in str(info.value)


def test_a_cache_of_json_reads_back_in_every_reader(tmp_path):
    path = str(tmp_path / "cache")
    write_shards(rows(), path, FEATURES, max_rows_per_shard=4)
    dataset = ShardedDataset(path)
    assert [dataset[i] for i in range(len(dataset))] == rows()
    assert dataset[[2, 0]] == [rows()[2], rows()[0]]
    assert ShardedDataset(path, image_mode="numpy")[0] == rows()[0], "Json values stay Python values"
    assert decode_table(ArrowBackend.open(path).slice(0, len(MIXED)), FEATURES) == rows()


def test_head_shows_json_values_as_json_and_info_names_the_kind(tmp_path, capsys):
    path = str(tmp_path / "cache")
    write_shards(rows(), path, FEATURES)
    assert cli_main(["head", path, "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert '{"a": [1, 2.5, null, true, "x"], "b": {"c": {}}}' in out and '[1, "two", [3.0]]' in out
    assert cli_main(["info", path]) == 0
    assert "Json()" in capsys.readouterr().out


def _corrupt(path: str, text: bytes, replacement: bytes) -> None:
    """Replaces `text` in the cache's one shard by `replacement` of the same length (its size unchanged),
    and lists the batches' new CRC-32s in the shard table, as a cache written that way would."""
    assert len(text) == len(replacement)
    [shard] = glob.glob(os.path.join(path, "shard-*.arrow"))
    with open(shard, "rb") as handle:
        data = handle.read()
    assert data.count(text) == 1
    data = data.replace(text, replacement)
    with open(shard, "wb") as handle:
        handle.write(data)

    def resealed(table: pa.Table) -> pa.Table:
        [offsets], [lengths] = table.column("batch_offsets").to_pylist(), table.column("batch_lengths").to_pylist()
        crcs = [zlib.crc32(data[offset:offset + length]) for offset, length in zip(offsets, lengths)]
        at = table.schema.get_field_index("batch_crc32s")
        return table.set_column(at, table.schema.field(at), pa.array([crcs], table.schema.field(at).type))
    rewrite_table(path, resealed)


@pytest.mark.parametrize("replacement, words", [
    (b'{"k":' + b"x" * 142 + b"}", "which is not JSON"),
    (b"[" * 74 + b"]" * 74, f"at most {MAX_DEPTH} are read"),
])
def test_stored_text_that_is_not_json_is_a_corrupt_cache_naming_the_column(tmp_path, replacement, words):
    path = str(tmp_path / "cache")
    features = Features({"id": Value("int64"), "meta": Struct({"j": Json()})})
    write_shards([{"id": 0, "meta": {"j": {"k": "x" * 140}}}], path, features)
    stored = b'{"k":"' + b"x" * 140 + b'"}'
    _corrupt(path, stored, replacement)
    dataset = ShardedDataset(path)
    with pytest.raises(CorruptCacheError) as info:
        dataset[0]
    assert "column 'meta'" in str(info.value) and words in str(info.value)
    with pytest.raises(CorruptCacheError) as info:
        decode_table(ArrowBackend.open(path).slice(0, 1), features)
    assert "column 'meta'" in str(info.value) and words in str(info.value)
