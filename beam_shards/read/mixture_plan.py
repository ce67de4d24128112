"""Where each row of a `Mixture`'s epochs comes from (pure arithmetic over Python ints or numpy arrays).

An epoch of `epoch_size` rows holds `counts[s]` rows of source s (`apportion`: the weights'
shares, rounded by largest remainder so they sum to `epoch_size` exactly). Slots: the k-th
row of source s in an epoch is keyed at position floor((2k + 1) * epoch_size / (2 * counts[s])),
the middle of its even share of the epoch; the epoch's rows are the keys in order (ties in
source order), so a source's rows are never more than epoch_size / counts[s] + the number of
sources apart (`slots`). Source s's k-th row of epoch e is a position of its stream of passes
(`mixture_streams`, `stream_position`): for a repeated source (counts[s] > its rows),
e * counts[s] + k, so it reads each row once before any again; for a subsampled one, the
k-th row of the epoch's share of one pass, each pass cut into rows // counts[s] epochs, so
an epoch never reads a row twice and the epochs read all its rows in turn (the rest of a
pass that does not divide is left to the later passes, shuffled anew).

Every answer is computed for the positions asked, in a fixed few numpy steps, without
arrays of an epoch's size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

# Up to here, a key count's product (x + 1) * 2 * count fits int64; past it, Python ints count.
_INT64_TOTAL = 1 << 31
# A repeated source's epochs per pass in `stream_table`: past every epoch (indices stay below 2^62).
_ONE_PASS = 1 << 62
# Epochs whose slots repeat within this many positions keep one period of them as a table.
_PERIOD_LIMIT = 1 << 12


def apportion(weights: Sequence[float], total: int) -> list[int]:
    """Counts proportional to `weights` summing to `total`: each share's floor, then one more for the
    largest remainders (ties to the earlier weight)."""
    exact = [Fraction(weight) for weight in weights]  # floats as they are: no rounding error to break ties
    shares = [weight * total / sum(exact) for weight in exact]
    counts = [math.floor(share) for share in shares]
    by_remainder = sorted(range(len(weights)), key=lambda s: (-(shares[s] - counts[s]), s))
    for s in by_remainder[:total - sum(counts)]:
        counts[s] += 1
    return counts


def stream_position(epoch: int, occurrence: int, count: int, length: int) -> int:
    """Where in its stream of passes a source of `length` rows, `count` of them per epoch, has the
    `occurrence`-th row of epoch `epoch` (Python ints)."""
    if count <= length:
        per_pass = length // count
        return epoch // per_pass * length + epoch % per_pass * count + occurrence
    return epoch * count + occurrence


def stream_table(counts: Sequence[int], lengths: Sequence[int]) -> np.ndarray:
    """The (epochs per pass, length, count) of each source, as `stream_positions` reads them (int64,
    3 x sources): a repeated source's epochs per pass are past any epoch, so one formula serves both kinds."""
    per_pass = [length // count if 0 < count <= length else _ONE_PASS for count, length in zip(counts, lengths)]
    return np.array([per_pass, list(lengths), list(counts)], dtype=np.int64)


def stream_positions(epochs: np.ndarray, occurrences: np.ndarray, sources: np.ndarray,
                     table: np.ndarray) -> np.ndarray:
    """`stream_position` of each (epoch, occurrence) of source `sources` (int64 arrays; `table` is
    `stream_table`'s), in a few numpy steps: each costs a batch of a mixture more than its elements do."""
    per_pass, lengths, counts = table.take(sources, axis=1)
    passes, within = np.divmod(epochs, per_pass)
    passes *= lengths
    within *= counts
    passes += within
    passes += occurrences
    return passes


def slots(positions: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, occurrence) of each epoch position in `positions` (int64, 0 <= p < sum(counts)): which
    source's row fills it, and which of that source's rows of the epoch (0 .. counts[s] - 1) it is."""
    total, sources, length = int(counts.sum()), len(counts), len(positions)
    reach = _reach(sources)
    if total >= _INT64_TOTAL:
        positions, counts = positions.astype(object), counts.astype(object)
    # [x, source, position]: each source's keys up to x, for the x around each position from one
    # before the first that can hold it (the formula's counts grow with x outside the epoch too)
    table = _keys_up_to(positions + np.arange(-reach, reach + 1)[:, None, None], counts[:, None], total)
    # how many rows of the epoch come up to each (x, source) in (x, source) order; those not past the
    # position are the pairs before the one holding it
    upto = table[1:] - table[:-1]
    for column in range(1, sources):  # a running sum by slices: numpy's along a short axis costs more
        upto[:, column] += upto[:, column - 1]
    upto += table[:-1].sum(axis=1, keepdims=True)
    before = (upto <= positions).sum(axis=(0, 1))
    source = before % sources
    return source, table.reshape(-1).take((before + sources) * length + np.arange(length)).astype(np.int64) - 1


def slot(position: int, counts: Sequence[int]) -> tuple[int, int]:
    """`slots` of one position, in Python ints (a numpy call costs more than this whole search)."""
    total = sum(counts)
    x = position - _reach(len(counts))  # the keys up to here do not outnumber the position
    before = [_keys_up_to(x, count, total) for count in counts]
    while True:
        x += 1
        upto = [_keys_up_to(x, count, total) for count in counts]
        if sum(upto) > position:
            break
        before = upto
    rank = position - sum(before)  # among the sources with a key at x
    at_key = [(source, count_up) for source, (count_up, count_before) in enumerate(zip(upto, before))
              if count_up > count_before]
    source, count_up = at_key[rank]
    return source, count_up - 1


def _reach(sources: int) -> int:
    """How far from a position its key lies at most: the keys up to x number x + 1, give or take
    sources / 2 (so at most x + reach of them, and at least x + 1 - reach)."""
    return (sources + 1) // 2


def _keys_up_to(x, count, total: int):
    """How many of a source's `count` keys are at or before position x (-1 <= x < total; outside, a
    count that still grows with x); with arrays, a table of them."""
    return ((x + 1) * (2 * count) + (total - 1)) // (2 * total)


class EpochSlots:
    """`slots` and `slot` of one epoch's `counts`, by table when the epoch is periodic in short periods.

    Source s's keys repeat every epoch_size / g positions, g = gcd(counts), shifted by
    counts[s] / g occurrences (key k + counts[s] / g is key k's position + epoch_size / g),
    so the slots of one period give every position's. Round weights and epoch sizes
    make short periods (0.6 and 0.4 of 10^8 repeat every 5 positions); when the period
    is longer than `_PERIOD_LIMIT`, positions are searched for as `slots` does.
    """

    def __init__(self, counts: Sequence[int]):
        self._counts = list(counts)
        self._array = np.array(self._counts, dtype=np.int64)
        share = math.gcd(*self._counts)
        self._period = sum(self._counts) // share
        if self._period <= _PERIOD_LIMIT:
            sources, occurrences = slots(np.arange(self._period), self._array)
            self._sources, self._occurrences = sources, occurrences
            self._shifts = self._array // share
            self._sources_list, self._occurrences_list = sources.tolist(), occurrences.tolist()
            self._shifts_list = self._shifts.tolist()

    @property
    def periodic(self) -> bool:
        """Whether a period is kept: then positions may lie in later epochs too, position
        e * epoch_size + p giving occurrence e * counts[s] + k where p gives k."""
        return self._period <= _PERIOD_LIMIT

    def many(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`slots(positions, counts)`."""
        if self._period > _PERIOD_LIMIT:
            return slots(positions, self._array)
        periods, within = np.divmod(positions, self._period)
        sources = self._sources.take(within)
        periods *= self._shifts.take(sources)
        periods += self._occurrences.take(within)
        return sources, periods

    def one(self, position: int) -> tuple[int, int]:
        """`slot(position, counts)`."""
        if self._period > _PERIOD_LIMIT:
            return slot(position, self._counts)
        period, within = divmod(position, self._period)
        source = self._sources_list[within]
        return source, self._occurrences_list[within] + period * self._shifts_list[source]
