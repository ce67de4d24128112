"""A format-5 shard table whose batch spans lie: every reader gives a clear error, never a crash or another
batch's bytes served as if checked."""

from __future__ import annotations

import shutil
from collections.abc import Callable

import pyarrow as pa
import pytest

from beam_shards import ArrowBackend, CorruptCacheError, Features, ShardedDataset, Value, verify, write_shards

from _hostile import cases, rewrite_table

FEATURES = Features({"id": Value("int64"), "text": Value("string")})


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> str:
    """20 rows in 2 shards of batches of 4 rows."""
    path = str(tmp_path_factory.mktemp("spans") / "cache")
    write_shards(({"id": i, "text": f"row {i}" * (i % 5)} for i in range(20)), path, FEATURES, batch_size=4,
                 max_rows_per_shard=10)
    return path


def spans_changed(column: str, change: Callable[[list[int]], list[int]]) -> Callable[[pa.Table], pa.Table]:
    """A change of shard 0's list in span column `column`."""
    def changed(table: pa.Table) -> pa.Table:
        values = table.column(column).to_pylist()
        values[0] = change(values[0])
        index = table.schema.get_field_index(column)
        return table.set_column(index, table.schema.field(index), pa.array(values, pa.list_(pa.int64())))
    return changed


def swapped(values: list[int]) -> list[int]:
    return [values[1], values[0], *values[2:]]


# (name, change, words of the error every reader gives)
LIES = [
    ("an offset past the file", spans_changed("batch_offsets", lambda v: [v[0] + 10**9, *v[1:]]),
     ["batch offsets, lengths or CRCs that do not fit"]),
    ("a negative offset", spans_changed("batch_offsets", lambda v: [-8, *v[1:]]), ["do not fit"]),
    ("a zero length", spans_changed("batch_lengths", lambda v: [0, *v[1:]]), ["do not fit"]),
    ("one span too few", spans_changed("batch_crc32s", lambda v: v[:-1]), ["do not fit"]),
    ("a CRC past 32 bits", spans_changed("batch_crc32s", lambda v: [v[0] + (1 << 32), *v[1:]]), ["do not fit"]),
    ("spans out of order", spans_changed("batch_offsets", swapped), ["do not fit"]),
    ("an offset 8 bytes early", spans_changed("batch_offsets", lambda v: [v[0] - 8, *v[1:]]),
     ["record batch 0", "has CRC-32", "the shard table says"]),
    ("a wrong CRC", spans_changed("batch_crc32s", lambda v: [v[0] ^ 1, *v[1:]]),
     ["record batch 0", "has CRC-32", "the shard table says"]),
]


@pytest.mark.parametrize("change, words", cases(LIES))
def test_lying_spans_give_a_clear_error_from_every_reader(source, tmp_path, change, words):
    path = str(tmp_path / "cache")
    shutil.copytree(source, path)
    rewrite_table(path, change)
    readers = {"get_row": lambda: ArrowBackend.open(path).get_row(1),
               "take": lambda: ArrowBackend.open(path).take([12, 2]),
               "iter_batches": lambda: list(ArrowBackend.open(path).iter_batches()),
               "ShardedDataset": lambda: list(ShardedDataset(path))}
    for name, read in readers.items():
        with pytest.raises(CorruptCacheError) as raised:
            read()
        assert all(word in str(raised.value) for word in words), f"{name}: {raised.value}"
        assert "\n" not in str(raised.value)
    assert ArrowBackend.open(path).get_row(15)["id"] == 15, "the other shard reads"
    assert not verify(path).ok
