"""Hostile indices: every reader refuses a bad index, slice, list of indices or shard id with a clear error.

Each corpus is a table, one case a line: a name, the input, the error class expected and words its
message must hold. Add a case by adding a line. Every test runs under a timeout, so a hang fails
instead of stalling the suite.
"""

from __future__ import annotations

import numpy as np
import pytest

from beam_shards import ArrowBackend, Features, ShardedDataset, Value, write_shards

from _hostile import assert_clear, cases

pytestmark = pytest.mark.timeout(30)  # tests that need longer say so


# ---- indices -------------------------------------------------------------------------------

INDEX_ROWS = 10
# One index: ArrowBackend.get_row, ShardedDataset[index] and a view's.
INDEX_CASES = [
    ("True", True, TypeError, ["bool", "True"]),
    ("numpy True", np.True_, TypeError, ["bool"]),
    ("float", 2.5, TypeError, ["2.5"]),
    ("float of a whole number", 2.0, TypeError, ["2.0"]),
    ("None", None, TypeError, ["None"]),
    ("string", "3", TypeError, ["'3'"]),
    ("past the end", 10, IndexError, ["index 10", "10 rows"]),
    ("before the start", -11, IndexError, ["index -11"]),
    ("huge", 2**64 - 1, IndexError, ["18446744073709551615"]),
    ("numpy uint64 past int64", np.uint64(2**64 - 1), IndexError, ["18446744073709551615"]),
]
# Many indices: ArrowBackend.take, ShardedDataset[indices] and ShardedDataset.__getitems__.
INDICES_CASES = [
    ("uint64 past int64", np.array([2**64 - 1], dtype=np.uint64), IndexError, ["18446744073709551615"]),
    ("uint64 just past int64", np.array([3, 2**63], dtype=np.uint64), IndexError, ["9223372036854775808"]),
    ("bool array", np.array([True, False]), TypeError, ["bools"]),
    ("list of bools", [True, False, True], TypeError, ["bools"]),
    ("ints with a bool", [1, True], TypeError, ["bools", "[1, True]"]),
    ("2-D list", [[1, 2], [3, 4]], ValueError, ["one-dimensional", "(2, 2)"]),
    ("2-D array", np.zeros((2, 3), dtype=np.int64), ValueError, ["(2, 3)"]),
    ("ragged list", [[1, 2], [3]], ValueError, ["flat", "[[1, 2], [3]]"]),
    ("float array", np.array([1.0, 2.0]), TypeError, ["float64"]),
    ("list of floats", [1.5], TypeError, ["1.5"]),
    ("object array", np.array([1, "a"], dtype=object), TypeError, ["object"]),
    ("list with None", [1, None], TypeError, ["None"]),
    ("past the end", [0, 10], IndexError, ["index 10", "10 rows"]),
    ("before the start", np.array([-11]), IndexError, ["index -11"]),
    ("int past uint64", [2**64], IndexError, ["index 18446744073709551616", "10 rows"]),
    ("int past uint64 after a good one", [1, 2**70], IndexError, ["index 1180591620717411303424"]),
    ("negative int past int64", [-2**64], IndexError, ["index -18446744073709551616"]),
]
# ShardedDataset[start:stop:step] and a view's.
DATASET_SLICE_CASES = [
    ("bool start", slice(True, 3), TypeError, ["slice start", "bool"]),
    ("bool stop", slice(0, np.True_), TypeError, ["slice stop", "bool"]),
    ("bool step", slice(0, 3, False), TypeError, ["slice step", "bool"]),
    ("float stop", slice(0, 2.5), TypeError, ["slice stop", "2.5"]),
    ("string start", slice("1", None), TypeError, ["slice start", "'1'"]),
]
# ArrowBackend.iter_batches(shard_indices) of a cache of 3 shards.
SHARD_IDS_CASES = [
    ("float", [1.0], TypeError, ["shard index", "1.0"]),
    ("bool", [True], TypeError, ["shard index", "bool"]),
    ("numpy floats", np.array([0.0, 1.0]), TypeError, ["shard index", "0.0"]),
    ("a string", "0", TypeError, ["shard_indices", "'0'"]),
    ("an int", 2, TypeError, ["shard_indices", "int 2"]),
    ("past the end", [3], IndexError, ["shard index 3", "3 shards"]),
    ("negative", [-1], IndexError, ["shard index -1"]),
    ("huge", [2**70], IndexError, ["shard index 1180591620717411303424"]),
]
# ArrowBackend.slice(start, length).
SLICE_CASES = [
    ("float length", (3, 2.5), TypeError, ["slice length", "2.5"]),
    ("float start", (2.5, 3), TypeError, ["slice start", "2.5"]),
    ("bool start", (True, 2), TypeError, ["slice start", "bool"]),
    ("None length", (0, None), TypeError, ["slice length", "None"]),
    ("negative length", (3, -1), ValueError, ["-1"]),
    ("start past the end", (11, 1), IndexError, ["11", "10 rows"]),
    ("negative start", (-1, 2), IndexError, ["-1"]),
]


@pytest.fixture(scope="module")
def index_cache(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("indices") / "cache")
    write_shards(({"id": i} for i in range(INDEX_ROWS)), path, Features({"id": Value("int64")}), max_rows_per_shard=4)
    return path


def assert_every_reader_refuses(readers: dict, argument, expected: type, words: list[str]) -> None:
    for name, read in readers.items():
        with pytest.raises(Exception) as raised:
            read(argument)
        try:
            assert_clear(raised.value, expected, words)
        except AssertionError as failure:
            raise AssertionError(f"{name}: {failure}") from None


@pytest.mark.parametrize("index, expected, words", cases(INDEX_CASES))
def test_index_corpus(index_cache, index, expected, words):
    dataset = ShardedDataset(index_cache)
    readers = {"ArrowBackend.get_row": dataset.backend.get_row, "ShardedDataset[]": dataset.__getitem__,
               "a view's []": dataset[:].__getitem__}
    assert_every_reader_refuses(readers, index, expected, words)


@pytest.mark.parametrize("indices, expected, words", cases(INDICES_CASES))
def test_indices_corpus(index_cache, indices, expected, words):
    dataset = ShardedDataset(index_cache)
    readers = {"ArrowBackend.take": dataset.backend.take, "ShardedDataset[]": dataset.__getitem__,
               "ShardedDataset.__getitems__": dataset.__getitems__, "a view's []": dataset[:].__getitem__}
    assert_every_reader_refuses(readers, indices, expected, words)


@pytest.mark.parametrize("bounds, expected, words", cases(DATASET_SLICE_CASES))
def test_dataset_slice_corpus(index_cache, bounds, expected, words):
    dataset = ShardedDataset(index_cache)
    assert_every_reader_refuses({"ShardedDataset[]": dataset.__getitem__, "a view's []": dataset[1:].__getitem__},
                                bounds, expected, words)


@pytest.mark.parametrize("shard_indices, expected, words", cases(SHARD_IDS_CASES))
def test_shard_ids_corpus(index_cache, shard_indices, expected, words):
    backend = ArrowBackend.open(index_cache)
    assert backend.num_shards == 3
    assert_every_reader_refuses({"ArrowBackend.iter_batches": lambda ids: list(backend.iter_batches(ids))},
                                shard_indices, expected, words)


@pytest.mark.parametrize("arguments, expected, words", cases(SLICE_CASES))
def test_slice_corpus(index_cache, arguments, expected, words):
    assert_every_reader_refuses({"ArrowBackend.slice": lambda args: ArrowBackend.open(index_cache).slice(*args)},
                                arguments, expected, words)


def test_numpy_ints_of_every_width_still_index(index_cache):
    backend = ArrowBackend.open(index_cache)
    for dtype in (np.int8, np.uint8, np.int32, np.uint64):
        assert backend.take(np.array([7, 2], dtype=dtype)).column("id").to_pylist() == [7, 2]
        assert backend.get_row(dtype(7)) == {"id": 7}
    assert backend.slice(np.int64(2), np.uint64(3)).column("id").to_pylist() == [2, 3, 4]
    assert backend.take([]).num_rows == 0 and ShardedDataset(index_cache)[np.array([], dtype=np.uint64)] == []
    assert [row["id"] for row in ShardedDataset(index_cache)[np.int64(8):np.uint8(2):-3]] == [8, 5]
    assert [b.num_rows for b in backend.iter_batches(np.array([2, 0], dtype=np.uint8))] == [2, 4]
