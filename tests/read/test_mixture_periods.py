"""A mixture's epoch slots by period table: every position's source and occurrence as the search finds them,
for short periods (kept as a table) and long ones (searched), and a batch's stream positions as one's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beam_shards.read.mixture_plan import (EpochSlots, apportion, slot, slots, stream_position, stream_positions,
                                           stream_table)


@pytest.mark.parametrize("counts", [[6 * 10**7, 4 * 10**7], [3000, 2000], [700, 300, 0], [5, 7, 11], [1],
                                    [3 * 10**11, 2 * 10**11, 10**11], [10**6 + 1, 10**6]])
def test_periods_give_the_slots_the_search_finds(counts):
    total = sum(counts)
    table = EpochSlots(counts)
    rng = np.random.default_rng(0)
    positions = np.unique(np.concatenate([np.arange(min(total, 50)), rng.integers(0, total, 300),
                                          np.arange(max(0, total - 20), total)]))
    sources, occurrences = table.many(positions)
    expected = slots(positions, np.array(counts))
    assert sources.tolist() == expected[0].tolist() and occurrences.tolist() == expected[1].tolist()
    assert [table.one(p) for p in positions[::7].tolist()] == [slot(p, counts) for p in positions[::7].tolist()]


def test_a_short_period_is_a_table_and_a_long_one_is_searched():
    short, long = EpochSlots([6 * 10**7, 4 * 10**7]), EpochSlots([10**6 + 1, 10**6])
    assert short._period == 5 and len(short._sources) == 5
    assert long._period == 2 * 10**6 + 1 and not hasattr(long, "_sources")
    assert math.gcd(10**6 + 1, 10**6) == 1


def test_a_batchs_stream_positions_are_each_ones():
    lengths = [3000, 2000, 7]
    counts = apportion([0.5, 0.3, 0.2], 10**4)  # the first two subsampled, the last repeated
    rng = np.random.default_rng(1)
    epochs, sources = rng.integers(0, 10**9, 200), rng.integers(0, 3, 200)
    occurrences = rng.integers(0, np.array(counts)[sources])
    got = stream_positions(epochs, occurrences, sources, stream_table(counts, lengths))
    assert got.tolist() == [stream_position(e, o, counts[s], lengths[s])
                            for e, o, s in zip(epochs.tolist(), occurrences.tolist(), sources.tolist())]


def test_a_period_table_continues_into_later_epochs():
    counts = [6, 4, 2]
    table, total = EpochSlots(counts), sum(counts)
    assert table.periodic and not EpochSlots([10**6 + 1, 10**6]).periodic
    positions = np.arange(total)
    sources, occurrences = slots(positions, np.array(counts))
    for epoch in (1, 7, 10**12):
        later = table.many(positions + epoch * total)
        assert later[0].tolist() == sources.tolist()
        assert later[1].tolist() == (occurrences + epoch * np.array(counts)[sources]).tolist()
        assert table.one(epoch * total + 5) == (int(sources[5]), int(occurrences[5]) + epoch * counts[sources[5]])
