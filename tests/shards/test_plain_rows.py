"""Examples whose values are already in their encoded form skip per-value encoding and are
checked column by column with their batch: what is accepted, refused, and how errors read
must be exactly what per-value encoding gives."""

from __future__ import annotations

import gc
from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pytest
from test_writer import Shards

from beam_shards import (Array, ClassLabel, EncodeError, Features, Image, ShardedDataset, ShardWriter, Value,
                         WriterOptions, write_shards)
from beam_shards.features import Sequence
from beam_shards.shards.row_sizes import plain_sizer, row_nbytes

from _support import jpeg

PLAIN = Features({
    "id": Value("int64"),
    "small": Value("int8"),
    "count": Value("uint32"),
    "score": Value("float64"),
    "flag": Value("bool"),
    "image": Image(),
    "label": ClassLabel(num_classes=10),
    "embedding": Array((4,), "float32"),
    "caption": Value("string"),
    "blob": Value("binary"),
})


def plain_example(i: int) -> dict:
    return {"id": i, "small": i % 100, "count": i * 7, "score": i / 3, "flag": i % 2 == 0, "image": jpeg(i % 3),
            "label": i % 10, "embedding": np.arange(4, dtype=np.float32) + i, "caption": f"row {i}",
            "blob": bytes([i % 256]) * 3}


def write(examples: list, keys: list | None = None, on_bad=None, **options) -> tuple[pa.Table, Shards]:
    shards = Shards()
    writer = ShardWriter(PLAIN, shards, WriterOptions(**options), on_bad)
    for k, e in enumerate(examples):
        writer.add(e, k if keys is None else keys[k])
    writer.close()
    batches = [b for i in range(len(shards.streams)) for b in shards.batches(i)]
    return pa.Table.from_batches(batches, schema=PLAIN.storage_schema("hf")), shards


def encoded_table(examples: list) -> pa.Table:
    batch = PLAIN.build_batch([PLAIN.encode_example(e) for e in examples])
    return pa.Table.from_batches([batch.cast(PLAIN.storage_schema("hf"))])


@pytest.mark.parametrize("features, example", [
    (PLAIN, plain_example(5)),
    (Features({"image": Image()}), {"image": jpeg(1)}),
    (Features({"embedding": Array((3, 2), "float64")}), {"embedding": np.ones((3, 2))}),
    # An array of the wrong shape is plain until its batch is checked: its real size counts.
    (Features({"embedding": Array((2,), "float32")}), {"embedding": np.ones(1000, np.float32)}),
])
def test_a_plain_rows_size_is_the_writers_estimate_for_its_values(features, example):
    values = features.plain_values(example)
    assert values is not None
    assert plain_sizer(features.plain_types)(values) == row_nbytes(dict(zip(features, values)))


def test_plain_rows_are_left_to_the_garbage_collector_to_untrack():
    # A writer buffers a batch of rows: rows the collector keeps tracking would reach its
    # oldest generation and bring on full collections, each a walk of a Beam worker's heap.
    values = PLAIN.plain_values(plain_example(2))
    gc.collect()
    assert type(values) is tuple and not gc.is_tracked(values)


def test_plain_values_take_only_examples_of_the_exact_plain_types():
    assert PLAIN.plain_values(plain_example(3)) is not None
    for field, value in [("id", np.int64(3)), ("id", True), ("score", 1), ("flag", np.bool_(True)),
                         ("image", bytearray(jpeg(0))), ("label", "cat"), ("embedding", [0.0, 1.0, 2.0, 3.0]),
                         ("caption", b"bytes"), ("blob", "text"), ("id", None)]:
        assert PLAIN.plain_values({**plain_example(3), field: value}) is None, field
    assert PLAIN.plain_values(OrderedDict(plain_example(3))) is None  # a Mapping, not a dict
    assert PLAIN.plain_values({k: v for k, v in plain_example(3).items() if k != "id"}) is None
    assert Features({"x": Sequence(Value("int64"))}).plain_values({"x": [1]}) is None
    assert Features({"x": Array((None, 2), "uint8")}).plain_values({"x": np.zeros((1, 2), np.uint8)}) is None
    assert Features({"x": Value("float32")}).plain_values({"x": 1.5}) is None


def test_plain_and_encoded_rows_are_stored_alike():
    examples = [plain_example(i) for i in range(40)]
    examples[3]["id"] = np.int64(3)  # not plain: encoded one by one
    examples[7]["embedding"] = np.arange(4, dtype=np.float64)  # plain by type, cast when encoded
    examples[8]["embedding"] = np.arange(8, dtype=np.float32)[::2]  # not contiguous: copied when encoded
    table, _ = write(examples, batch_size=16)
    assert table.equals(encoded_table(examples))


BAD_VALUES = [
    ("small", 200), ("count", -1), ("count", 2**32), ("id", 2**63), ("label", 10), ("label", -1),
    ("caption", "a\ud800b"), ("image", jpeg(1)[:-300]), ("image", b""), ("image", b"not an image"),
    ("embedding", np.zeros(5, np.float32)), ("embedding", np.full(4, 1e300, np.float64)),
]


@pytest.mark.parametrize("field, value", BAD_VALUES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_VALUES)])
def test_a_bad_plain_value_gets_the_error_per_value_encoding_gives(field, value):
    examples = [plain_example(i) for i in range(12)]
    examples[5][field] = value
    with pytest.raises(EncodeError) as expected:
        PLAIN.encode_values(examples[5], 5)
    with pytest.raises(EncodeError) as caught:
        write(examples, batch_size=8)
    assert str(caught.value) == str(expected.value) and caught.value.example == 5
    skipped = []
    table, _ = write(examples, on_bad=lambda e, key, error: skipped.append((key, str(error))), batch_size=8)
    assert skipped == [(5, str(expected.value))]
    assert table.column("id").to_pylist() == [i for i in range(12) if i != 5]


def test_an_unkeyed_bad_plain_example_is_named_by_its_first_fields():
    examples = [plain_example(i) for i in range(4)]
    examples[2]["label"] = 99
    with pytest.raises(EncodeError, match=r"'id': 2, 'small': 2, 'count': 14"):
        write(examples, keys=[None] * 4)


def test_a_bad_plain_example_is_reported_by_close_when_its_batch_is_the_last():
    writer = ShardWriter(PLAIN, Shards(), WriterOptions(batch_size=100))
    bad = {**plain_example(1), "small": -129}
    assert writer.add(plain_example(0), 0) == 1 and writer.add(bad, 1) == 1  # checked with its batch
    with pytest.raises(EncodeError, match="does not fit int8"):
        writer.close()


@pytest.mark.parametrize("features, extra", [
    (Features({"i": Value("int64"), "x": Array((3,), "float32")}), {}),  # plain rows
    (Features({"i": Value("int64"), "x": Array((3,), "float32"), "t": Sequence(Value("int64"))}), {"t": [1]}),
    (Features({"i": Value("int64"), "x": Array((None, 3), "float32")}), {}),  # variable first dimension
], ids=["plain", "encoded", "variable"])
def test_a_caller_refilling_one_array_gets_each_rows_values(features, extra):
    """Writers keep rows until their batch is built: an array a generator refills must be
    taken as it was when it was added, not as it is at the flush."""
    buffer = np.zeros(3 if features["x"].shape[0] else (1, 3), np.float32)
    shards = Shards()
    writer = ShardWriter(features, shards, WriterOptions(batch_size=100))
    for i in range(5):
        buffer[...] = i
        writer.add({"i": i, "x": buffer, **extra}, i)
    writer.close()
    values = [np.asarray(v, np.float32).reshape(-1)[0] for v in shards.column("x")]
    assert values == [0, 1, 2, 3, 4]


def test_a_null_beside_an_array_of_a_nullable_array_feature_is_written(tmp_path):
    """Found by the write_shards property test: a None before a plain array in one batch."""
    features = Features({"id": Value("int64"), "a": Array((1,), "bool", nullable=True)})
    path = str(tmp_path / "cache")
    write_shards([{"id": 0, "a": None}, {"id": 1, "a": np.array([False])}], path, features, batch_size=2)
    rows = ShardedDataset(path)[:]
    assert rows[0]["a"] is None and rows[1]["a"].tolist() == [False]
