"""A mixture's arithmetic: each pass over a source is a permutation, batches and single positions agree,
and the slots of an epoch are the merged keys, also past int64 products."""

from __future__ import annotations

import numpy as np
import pytest

from beam_shards.read.mixture_plan import slot, slots
from beam_shards.read.mixture_streams import SourceStreams, _grid

LENGTHS = [1, 2, 3, 7, 10, 97, 1999, 3000]


def _pass(streams: SourceStreams, source: int, length: int, number: int) -> list[int]:
    positions = np.arange(number * length, (number + 1) * length)
    return streams.rows(positions, np.full(length, source)).tolist()


def test_each_pass_holds_each_row_once_and_single_positions_agree():
    streams = SourceStreams(LENGTHS, seed=11)
    for source, length in enumerate(LENGTHS):
        for number in (0, 1, 10**6):
            rows = _pass(streams, source, length, number)
            assert sorted(rows) == list(range(length)), (length, number)
            assert rows == [streams.row(number * length + k, source) for k in range(length)]


def test_walks_taken_in_batches_and_one_by_one_agree():
    length = 7  # a 2 x 4 grid: one cell in 8 past the rows, so a batch of 700 walks in numpy, then alone
    assert _grid(length) == (2, 4)
    streams = SourceStreams([length], seed=0)
    positions = np.arange(700)
    assert streams.rows(positions, np.zeros(700, dtype=np.int64)).tolist() == [streams.row(p, 0) for p in range(700)]


def test_passes_and_seeds_give_other_orders_and_the_same_seed_the_same():
    streams, again, other = SourceStreams([97], 3), SourceStreams([97], 3), SourceStreams([97], 4)
    passes = [tuple(_pass(streams, 0, 97, number)) for number in range(20)]
    assert len(set(passes)) == 20
    assert [tuple(_pass(again, 0, 97, number)) for number in range(20)] == passes
    assert tuple(_pass(other, 0, 97, 0)) != passes[0]


def test_a_pass_is_shuffled_evenly():
    rows = np.array(_pass(SourceStreams([3000], 5), 0, 3000, 2))
    # the first tenth of a pass holds rows from all over: each tenth of the rows about equally
    assert np.bincount(rows[:300] // 300, minlength=10).min() >= 15
    assert abs(np.corrcoef(np.arange(3000), rows)[0, 1]) < 0.1


@pytest.mark.parametrize("length", [1, 2, 5, 1999, 10**9 + 7, 2**62 - 1])
def test_the_grid_holds_the_rows_with_few_cells_past_them(length):
    width, height = _grid(length)
    assert length <= width * height <= length + width
    assert length < 4 or min(width, height) >= 2


def _merged_keys(counts: list[int]) -> list[tuple[int, int]]:
    total = sum(counts)
    keys = sorted(((2 * k + 1) * total // (2 * count), source, k) for source, count in enumerate(counts)
                  for k in range(count))
    return [(source, k) for _, source, k in keys]


def test_slots_are_the_merged_keys_of_any_counts():
    rng = np.random.default_rng(1)
    cases = [[1, 0, 0, 0, 0, 0, 0], [0, 0, 3, 0, 0, 1], [5, 7, 11, 13, 2]]
    cases += [rng.integers(0, 20, rng.integers(1, 9)).tolist() for _ in range(100)]
    for counts in [case for case in cases if sum(case)]:
        sources, occurrences = slots(np.arange(sum(counts)), np.array(counts))
        expected = _merged_keys(counts)
        assert list(zip(sources.tolist(), occurrences.tolist())) == expected, counts
        assert [slot(p, counts) for p in range(sum(counts))] == expected, counts


def test_slots_of_an_epoch_past_int64_products():
    counts = [3 * 10**11, 2 * 10**11 + 7, 5]  # (x + 1) * 2 * count overflows int64
    positions = np.array([0, 1, 5, 10**11, 2**38, 5 * 10**11 - 1, sum(counts) - 1])
    sources, occurrences = slots(positions, np.array(counts))
    assert list(zip(sources.tolist(), occurrences.tolist())) == [slot(int(p), counts) for p in positions]
    assert slot(10**11, counts) == (1, 40_000_000_000) and slot(sum(counts) - 1, counts)[0] == 0
