"""A binary column past 2 GiB in one record batch of one shard: written, taken across, verified; and
text past 2 GiB in what would be one batch, cut into batches a 32-bit string column holds.

Five values of 430 MB (2.15 GB, more than 2**31 bytes) go into a single record
batch, so the column's offsets on disk pass 2**31: Arrow's 32-bit `binary` would
overflow, the cache's 64-bit `large_binary` must not. Two distinct values alternate,
so the test holds 0.9 GB of Python bytes; Arrow checks each value's length and first
and last bytes, so no value is copied back into Python. Peak memory is about 6 GB,
while the batch is written: the values, the batch, and pyarrow's copy of the batch's
data buffer on its way to a Python file object.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from beam_shards import ArrowBackend, EncodeError, Features, Sequence, Value, verify, write_shards

COUNT = 5
SIZE = 430_000_000  # five of them: 2.15e9 > 2**31
FEATURES = Features({"id": Value("int64"), "blob": Value("binary")})
HEAD = len(b"value 0 begins")


def _values() -> list[bytes]:
    return [f"value {k} begins".encode() + bytes([65 + k]) * (SIZE - HEAD - 1) + bytes([97 + k]) for k in range(2)]


def _check(table: pa.Table, ids: list[int]) -> None:
    blobs = table.column("blob")
    assert table.column("id").to_pylist() == ids
    assert pc.binary_length(blobs).to_pylist() == [SIZE] * len(ids)
    assert pc.binary_slice(blobs, 0, HEAD).to_pylist() == [f"value {i % 2} begins".encode() for i in ids]
    assert pc.binary_slice(blobs, SIZE - 2, SIZE).to_pylist() == [bytes([65 + i % 2, 97 + i % 2]) for i in ids]


@pytest.mark.slow
def test_a_column_past_2_gib_in_one_batch(tmp_path):
    path = str(tmp_path / "cache")
    values = _values()
    try:
        manifest = write_shards(({"id": i, "blob": values[i % 2]} for i in range(COUNT)), path, FEATURES,
                                shard_size_bytes=16 << 30, batch_size=COUNT, batch_bytes=8 << 30)
        del values
        assert manifest.num_shards == 1
        backend = ArrowBackend.open(path)
        [batch] = backend.iter_batches()
        assert batch.schema.field("blob").type == pa.large_binary()
        offsets = np.frombuffer(batch.column("blob").buffers()[1], dtype=np.int64)
        assert offsets[COUNT] == COUNT * SIZE > 2 ** 31, "the offsets on disk pass 2**31"
        _check(backend.take([4, 1, 3]), [4, 1, 3])
        _check(backend.take([0, 4]), [0, 4])
        _check(backend.slice(2, 3), [2, 3, 4])
        assert backend.get_row(4)["blob"][-HEAD - 1:] == bytes([65] * HEAD + [97])
        assert verify(path).ok
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_text_past_2_gib_in_one_batch_is_cut_into_batches_that_fit(tmp_path):
    # The writer sizes a str by its characters: 740 rows of a million 3-byte characters count 0.74 GB, under
    # batch_bytes, but their UTF-8 takes 2.2 GB, past what Hugging Face's 32-bit string column holds.
    path = str(tmp_path / "cache")
    text = "\u4e2d" * 1_000_000
    features = Features({"id": Value("int64"), "text": Value("string")})
    try:
        manifest = write_shards(({"id": i, "text": text} for i in range(740)), path, features,
                                shard_size_bytes=16 << 30, batch_bytes=1 << 30)
        rows = manifest.shards.batch_rows(0)
        assert manifest.num_shards == 1 and len(rows) > 1 and sum(rows) == 740, rows
        backend = ArrowBackend.open(path)
        assert backend.schema.field("text").type == pa.string()
        for i in (0, rows[0] - 1, rows[0], 739):
            row = backend.take([i])
            assert row.column("id").to_pylist() == [i] and pc.utf8_length(row.column("text")).to_pylist() == [10**6]
        assert verify(path).ok
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_a_row_of_more_list_items_than_32_bit_offsets_hold_is_refused_naming_its_column(tmp_path):
    # One row of 2**31 + 10 bools: numpy's zeros are never touched, Arrow's bitmap takes 270 MB. Sizing the
    # row once made an array of every item's size (34 GB); the writer then refuses it, naming the column.
    items = 2**31 + 10
    column = pa.LargeListArray.from_arrays(pa.array([0, items], pa.int64()), pa.array(np.zeros(items, dtype=bool)))
    path = str(tmp_path / "cache")
    with pytest.raises(EncodeError, match=r"field 'flags'.*one row holds more than a list<item: bool> column holds.*"
                                          r"split longer lists across rows"):
        write_shards([pa.table({"flags": column})], path, Features({"flags": Sequence(Value("bool"))}))
    assert not os.path.exists(os.path.join(path, "_metadata.json"))
