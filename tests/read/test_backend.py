"""ArrowBackend: routing, take/slice/iter_batches, the LRU of open shards, pickling, bad shards."""

from __future__ import annotations

import multiprocessing
import os
import pickle

import numpy as np
import pyarrow as pa
import pytest

from beam_shards import ArrowBackend, CorruptCacheError, Features, Value, write_shards
from beam_shards.features import Sequence
from beam_shards.read.indexing import check_indices
from beam_shards.shards.shard_file import ShardFile
from beam_shards.shards.span_reader import SpanReader

ROWS = 95
SHARD_ROWS = 10
FEATURES = Features({"i": Value("int64"), "blob": Value("binary"), "text": Value("string"),
                     "seq": Sequence(Value("int32"))})


def row(i: int) -> dict:
    return {"i": i, "blob": bytes([i % 256]) * (i % 7), "text": f"row {i}", "seq": list(range(i % 4))}


def write(path: str, **options) -> str:
    write_shards((row(i) for i in range(ROWS)), path, FEATURES, max_rows_per_shard=SHARD_ROWS, batch_size=4,
                 **options)
    return path


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return write(str(tmp_path_factory.mktemp("backend") / "cache"))


@pytest.fixture
def backend(cache) -> ArrowBackend:
    return ArrowBackend.open(cache)


def ids(table: pa.Table) -> list[int]:
    return table.column("i").to_pylist()


def test_sizes_and_schema(backend):
    assert backend.num_rows == len(backend) == ROWS
    assert backend.num_shards == 10
    assert backend.schema.equals(FEATURES.storage_schema("hf"))
    assert backend.features == FEATURES and backend.manifest.num_rows == ROWS
    assert backend.shard_offsets.tolist() == list(range(0, ROWS, SHARD_ROWS)) + [ROWS]
    assert backend.open_shards == []
    assert "num_rows=95" in repr(backend) and "num_shards=10" in repr(backend)


def test_get_row_every_index_and_negative(backend):
    assert [backend.get_row(i) for i in range(ROWS)] == [row(i) for i in range(ROWS)]
    assert backend.get_row(-1) == row(ROWS - 1) and backend.get_row(-ROWS) == row(0)
    assert backend.get_row(np.int32(42)) == row(42)


@pytest.mark.parametrize("index", [ROWS, ROWS + 7, -ROWS - 1])
def test_get_row_out_of_range_names_index_and_length(backend, index):
    with pytest.raises(IndexError, match=f"index {index} out of range for a cache of {ROWS} rows"):
        backend.get_row(index)


@pytest.mark.parametrize("index", [1.0, "3", None])
def test_get_row_rejects_non_integers(backend, index):
    with pytest.raises(TypeError):
        backend.get_row(index)


def test_get_row_on_a_many_shard_cache_opens_one_shard(backend):
    backend.get_row(57)
    assert backend.open_shards == [5]
    backend.get_row(-1)
    assert backend.open_shards == [5, 9]


def test_take_keeps_order_and_duplicates_across_shards(backend):
    indices = [93, 0, 57, 57, 12, -1, 3, 93, 40]
    table = backend.take(indices)
    assert ids(table) == [i % ROWS for i in indices]
    assert table.to_pylist() == [row(i % ROWS) for i in indices]
    assert table.schema.equals(backend.schema)


def test_take_keeps_the_schema_with_its_metadata(backend):
    table = backend.take([57, 3, 57])
    assert table.schema.equals(backend.schema, check_metadata=True)
    assert table.schema.metadata == backend.schema.metadata


def test_take_gives_the_manifest_schema_when_the_shards_carry_other_metadata(backend, monkeypatch):
    schema = backend.schema.with_metadata({b"note": b"not what the shard files carry"})
    monkeypatch.setattr(backend, "_schema", schema)
    table = backend.take([57, 3, 57])
    assert ids(table) == [57, 3, 57] and table.schema.equals(schema, check_metadata=True)


def test_take_routes_past_empty_record_batches():
    schema = pa.schema([("x", pa.int64())])
    chunks = [[0, 1, 2], [], [3], [], [], [4, 5], []]
    table = pa.Table.from_batches([pa.record_batch([pa.array(c, pa.int64())], schema=schema) for c in chunks])
    backend = ArrowBackend.from_table(table)
    indices = [5, 3, 0, 4, 3, -1, 2]
    assert backend.take(indices).column("x").to_pylist() == [5, 3, 0, 4, 3, 5, 2]
    assert [row["x"] for row in backend.read_rows(np.array([4, 3, 2]), "bytes")] == [4, 3, 2]


def test_take_a_random_permutation(backend):
    order = np.random.default_rng(3).permutation(ROWS)
    assert ids(backend.take(order)) == order.tolist()
    assert ids(backend.take(np.sort(order))) == list(range(ROWS))


def test_take_a_contiguous_run_equals_a_slice(backend):
    table = backend.take(np.arange(8, 33))
    assert ids(table) == list(range(8, 33)) and table.equals(backend.slice(8, 25))


def test_take_within_one_shard_opens_only_that_shard(backend):
    assert ids(backend.take([24, 21, 29, 21])) == [24, 21, 29, 21]
    assert backend.open_shards == [2]


def test_take_edge_cases(backend):
    empty = backend.take([])
    assert empty.num_rows == 0 and empty.schema.equals(backend.schema)
    assert ids(backend.take([7])) == [7]
    with pytest.raises(ValueError, match=r"one-dimensional; got shape \(2, 2\)"):
        backend.take(np.array([[1, 2], [3, 0]]))
    with pytest.raises(IndexError, match=f"index {ROWS} out of range for a cache of {ROWS} rows"):
        backend.take([0, ROWS])
    with pytest.raises(IndexError, match=f"index {-ROWS - 2} out of range"):
        backend.take([-ROWS - 2])
    with pytest.raises(TypeError, match="ints"):
        backend.take([1.5, 2.0])


def test_check_indices_gives_a_new_int64_array():
    given = np.array([3, -1], dtype=np.int32)
    assert check_indices(given, 10).tolist() == [3, 9] and check_indices(given, 10).dtype == np.int64
    plain = np.array([3, 4])
    assert check_indices(plain, 10) is not plain and check_indices([4, -10], 10).tolist() == [4, 0]


@pytest.mark.parametrize("start, length", [(0, ROWS), (5, 30), (9, 2), (10, 10), (89, 100), (ROWS, 5), (50, 0)])
def test_slice_across_shard_boundaries(backend, start, length):
    table = backend.slice(start, length)
    assert ids(table) == list(range(start, min(start + length, ROWS)))
    assert table.schema.equals(backend.schema)


def test_slice_opens_only_the_shards_it_spans(backend):
    backend.slice(25, 20)
    assert backend.open_shards == [2, 3, 4]


def test_slice_errors(backend):
    with pytest.raises(IndexError, match=f"slice start {ROWS + 1} out of range for a cache of {ROWS} rows"):
        backend.slice(ROWS + 1, 1)
    with pytest.raises(IndexError):
        backend.slice(-1, 1)
    with pytest.raises(ValueError, match="length"):
        backend.slice(0, -1)


def batch_ids_of(batches, column: str) -> list[int]:
    return [i for batch in batches for i in batch.column(column).to_pylist()]


def batch_ids(batches) -> list[int]:
    return batch_ids_of(batches, "i")


def test_iter_batches_in_order_and_by_shard(backend):
    batches = list(backend.iter_batches())
    assert batch_ids(batches) == list(range(ROWS))
    assert all(b.num_rows <= 4 for b in batches) and all(b.schema.equals(backend.schema) for b in batches)
    assert batch_ids(backend.iter_batches(shard_indices=[3, 0])) == list(range(30, 40)) + list(range(10))
    assert batch_ids(backend.iter_batches(shard_indices=[])) == []


def test_iter_batches_shuffle_is_seeded(backend):
    first = batch_ids(backend.iter_batches(shuffle=True, seed=7))
    assert first == batch_ids(backend.iter_batches(shuffle=True, seed=7))
    assert first != batch_ids(backend.iter_batches(shuffle=True, seed=8))
    assert first != list(range(ROWS)) and sorted(first) == list(range(ROWS))
    subset = batch_ids(backend.iter_batches(shard_indices=[1, 2], shuffle=True, seed=1))
    assert sorted(subset) == list(range(10, 30))


def test_iter_batches_bad_shard_index(backend):
    with pytest.raises(IndexError, match="shard index 10 out of range for 10 shards"):
        list(backend.iter_batches(shard_indices=[0, 10]))


def test_lru_caps_open_shards(cache):
    backend = ArrowBackend.open(cache, max_open_shards=3)
    for shard in range(10):
        backend.get_row(shard * SHARD_ROWS)
        assert len(backend.open_shards) <= 3
    assert backend.open_shards == [7, 8, 9]
    backend.get_row(75)
    assert backend.open_shards == [8, 9, 7]
    backend.get_row(0)
    assert backend.open_shards == [9, 7, 0]
    assert ids(backend.take(np.arange(ROWS)[::-1])) == list(range(ROWS))[::-1]
    assert len(backend.open_shards) == 3
    with pytest.raises(ValueError, match="max_open_shards"):
        ArrowBackend.open(cache, max_open_shards=0)


def test_in_memory_table_with_narrow_binary_and_string_columns():
    table = pa.table({"b": pa.array([b"x", b"yy", None], pa.binary()), "s": pa.array(["a", "b", "c"], pa.string()),
                      "n": [1, 2, 3]})
    backend = ArrowBackend.from_table(table)
    assert backend.schema.field("b").type == pa.large_binary()
    assert backend.schema.field("s").type == pa.large_string()
    assert backend.schema.field("n").type == pa.int64()
    assert backend.num_shards == 1 and backend.manifest is None and backend.features is None
    assert backend.get_row(1) == {"b": b"yy", "s": "b", "n": 2}
    assert backend.take([2, 0]).to_pylist() == [{"b": None, "s": "c", "n": 3}, {"b": b"x", "s": "a", "n": 1}]
    assert backend.take([2, 0]).schema.field("b").type == pa.large_binary()
    assert pickle.loads(pickle.dumps(backend)).get_row(0) == {"b": b"x", "s": "a", "n": 1}
    with pytest.raises(TypeError, match="pyarrow Table"):
        ArrowBackend.from_table({"b": [1]})


def test_in_memory_table_of_many_chunks():
    table = pa.Table.from_batches([pa.record_batch({"n": list(range(k, k + 3))}) for k in range(0, 12, 3)])
    backend = ArrowBackend.from_table(table)
    assert backend.num_rows == 12 and backend.get_row(7) == {"n": 7}
    assert backend.take([11, 0, 4, 4]).column("n").to_pylist() == [11, 0, 4, 4]
    assert backend.slice(2, 6).column("n").to_pylist() == list(range(2, 8))
    assert batch_ids_of(backend.iter_batches(), "n") == list(range(12))


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_compressed_shards_read_the_same(tmp_path, backend, compression):
    packed = ArrowBackend.open(write(str(tmp_path / compression), compression=compression))
    assert packed.manifest.compression == compression
    indices = [94, 3, 3, 50, 11]
    assert packed.take(indices).equals(backend.take(indices))
    assert packed.get_row(-1) == backend.get_row(-1)
    assert packed.slice(5, 40).equals(backend.slice(5, 40))
    assert batch_ids(packed.iter_batches()) == list(range(ROWS))


def test_take_of_batches_held_in_memory_marks_them_recently_used(tmp_path, monkeypatch):
    path = write(str(tmp_path / "zstd"), compression="zstd")
    a, b, c = [1, 0], [4], [10]  # batch 0 and 1 of shard 0, batch 0 of shard 1 (a is not a run: no slice)
    probe = ArrowBackend.open(path)
    sizes = []
    for rows in (a, b, c):
        before = probe.memory_bytes
        probe.take(rows)
        sizes.append(probe.memory_bytes - before)
    reads = []
    real = SpanReader.read

    def read_batch(self, index):
        reads.append((self.file.shard_id, index))
        return real(self, index)

    monkeypatch.setattr(SpanReader, "read", read_batch)
    backend = ArrowBackend.open(path, max_memory_bytes=sum(sizes) - 1)  # room for a and c, not b besides
    for rows in (a, b, a, c):
        backend.take(rows)
    assert reads == [(0, 0), (0, 1), (1, 0)]  # a was read once: the second take found it
    assert ids(backend.take(a + c)) == a + c and len(reads) == 3  # taking a again kept it, so b was dropped
    assert ids(backend.take(b)) == b and reads[3:] == [(0, 1)]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_batch_rows_come_from_the_shard_table_so_no_batch_header_is_read_to_count(tmp_path, monkeypatch,
                                                                                  compression):
    path = write(str(tmp_path / str(compression)), compression=compression)
    opened = []
    real = ShardFile.reader

    def reader(self, source, columns=None):
        opened.append(columns)
        return real(self, source, columns)

    monkeypatch.setattr(ShardFile, "reader", reader)
    read_batches = []
    real_get = pa.ipc.RecordBatchFileReader.get_batch
    monkeypatch.setattr(pa.ipc.RecordBatchFileReader, "get_batch",
                        lambda self, i: read_batches.append(i) or real_get(self, i))
    assert ArrowBackend.open(path).get_row(57) == row(57)
    # Format 5 finds the batch from the shard table: no footer is read (a format-2 cache counted every batch's
    # rows first, formats 3 and 4 read the footer).
    assert opened == [] and read_batches == []


def test_pickling_drops_open_maps(backend):
    backend.take([0, 50, 90])
    clone = pickle.loads(pickle.dumps(backend))
    assert clone.open_shards == [] and backend.open_shards == [0, 5, 9]
    assert clone.get_row(33) == row(33) and clone.open_shards == [3]
    assert len(pickle.dumps(backend)) < 20_000


def read_in_child(backend: ArrowBackend, indices: list[int]) -> tuple[list[dict], list[int]]:
    """Runs in a worker process: what it reads, and the shards it opened there."""
    result = backend.take(indices).to_pylist()
    return result, backend.open_shards


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_backend_passed_to_another_process_reads_correct_rows(backend, method):
    backend.take([1, 15, 88])  # maps open in the parent
    indices = [93, 47, 2, 47]
    context = multiprocessing.get_context(method)
    with context.Pool(1) as pool:
        rows, opened = pool.apply(read_in_child, (backend, indices))
    assert rows == [row(i) for i in indices]
    assert opened == [0, 4, 9]


_INHERITED: list[ArrowBackend] = []


def _read_inherited(indices: list[int]) -> tuple[list[dict], list[int]]:
    return read_in_child(_INHERITED[0], indices)


def test_a_forked_process_reopens_the_maps_it_inherited(backend):
    backend.take([1, 15, 88])
    _INHERITED[:] = [backend]  # a forked child sees this object as it was, maps included, without pickling
    try:
        with multiprocessing.get_context("fork").Pool(1) as pool:
            rows, opened = pool.apply(_read_inherited, ([60, 61, 2],))
    finally:
        _INHERITED.clear()
    assert rows == [row(60), row(61), row(2)] and opened == [0, 6]


def test_missing_and_truncated_shards_fail_when_first_read(tmp_path):
    path = write(str(tmp_path / "c"))
    manifest = ArrowBackend.open(path).manifest
    victim, first = manifest.shard_path(4), int(ArrowBackend.open(path).shard_offsets[4])
    os.truncate(victim, 100)
    with pytest.raises(CorruptCacheError, match="truncated"):
        ArrowBackend.open(path).get_row(first)
    os.remove(victim)
    backend = ArrowBackend.open(path)  # an open touches no shard
    assert backend.get_row(0) == row(0)
    with pytest.raises(CorruptCacheError, match=f"{os.path.basename(victim)}\\) .* is missing"):
        backend.get_row(first)


def test_a_shard_damaged_after_open_fails_on_read_naming_it(tmp_path):
    path = write(str(tmp_path / "c"))
    backend = ArrowBackend.open(path)
    manifest = backend.manifest
    os.remove(manifest.shard_path(2))
    with pytest.raises(CorruptCacheError, match=r"shard 2 \(.*\) of version 1 of the cache at .* is missing"):
        backend.get_row(25)
    size = manifest.shards[3].num_bytes
    with open(manifest.shard_path(3), "wb") as handle:
        handle.write(b"\x00" * size)
    with pytest.raises(CorruptCacheError, match="shard 3 .*: record batch 0 .* has CRC-32 .*, the shard table says"):
        backend.take([31, 1])
    os.truncate(manifest.shard_path(4), 10)
    with pytest.raises(CorruptCacheError, match="has 10 bytes, the manifest says .* \\(truncated\\)"):
        backend.slice(40, 5)
    assert backend.get_row(1) == row(1)
