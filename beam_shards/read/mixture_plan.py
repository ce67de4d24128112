"""Where each row of a `Mixture`'s epochs comes from (pure arithmetic over numpy arrays).

An epoch of `epoch_size` rows holds `counts[s]` rows of source s (`apportion`: the weights'
shares, rounded by largest remainder so they sum to `epoch_size` exactly). Slots: the k-th
row of source s in an epoch is keyed at position floor((2k + 1) * epoch_size / (2 * counts[s])),
the middle of its even share of the epoch; the epoch's rows are the keys in order (ties in
source order), so a source's rows are never more than epoch_size / counts[s] + the number of
sources apart (`slots`). Streams: source s's rows come as an endless stream of passes, each
a permutation of its rows keyed by (seed, s, pass); epoch e takes stream positions
e * counts[s] ... (e + 1) * counts[s] - 1, so a subsampled source reads all its rows over the
epochs, and a repeated one reads each row once before any again (`stream_rows`).

Every answer is computed for the indices asked, in O(log sources) numpy steps, without
arrays of an epoch's size; the permutations are keyed hashes, cycle-walked (O(1) memory).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_ROUNDS = 3


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


def slots(positions: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, occurrence) of each epoch position in `positions` (int64, 0 <= p < sum(counts)): which
    source's row fills it, and which of that source's rows of the epoch (0 .. counts[s] - 1) it is."""
    total = int(counts.sum())
    reach = _reach(len(counts))
    low, high = np.maximum(positions - reach, 0), np.minimum(positions + reach, total - 1)
    for _ in range((2 * reach).bit_length()):  # the first key x whose keys up to it outnumber the position
        middle = (low + high) // 2
        past = _keys_up_to(middle[:, None], counts, total).sum(axis=1) > positions
        high = np.where(past, middle, high)
        low = np.where(past, low, middle + 1)
    upto = _keys_up_to(low[:, None], counts, total)
    before = _keys_up_to(low[:, None] - 1, counts, total)
    at_key = np.cumsum(upto - before, axis=1)
    source = np.argmax(at_key > (positions - before.sum(axis=1))[:, None], axis=1)
    return source, upto[np.arange(len(positions)), source] - 1


def slot(position: int, counts: Sequence[int]) -> tuple[int, int]:
    """`slots` of one position, in Python ints (a numpy call costs more than this whole search)."""
    total = sum(counts)
    reach = _reach(len(counts))
    low, high = max(position - reach, 0), min(position + reach, total - 1)
    while low < high:
        middle = (low + high) // 2
        if sum(_keys_up_to(middle, count, total) for count in counts) > position:
            high = middle
        else:
            low = middle + 1
    rank = position - sum(_keys_up_to(low - 1, count, total) for count in counts)
    at_key = [(source, _keys_up_to(low, count, total)) for source, count in enumerate(counts)
              if _keys_up_to(low, count, total) > _keys_up_to(low - 1, count, total)]
    source, upto = at_key[rank]
    return source, upto - 1


def _reach(sources: int) -> int:
    """How far from a position its key lies at most: the keys up to x number x + 1, give or take
    sources / 2."""
    return (sources + 1) // 2


def _keys_up_to(x, count, total: int):
    """How many of a source's `count` keys are at or before position x (-1 <= x < total); with x a
    column and `count` a row of counts, a table of them."""
    return ((x + 1) * (2 * count) + (total - 1)) // (2 * total)


def stream_rows(stream: np.ndarray, length: int, seed: int, source: int) -> np.ndarray:
    """The rows (0 .. length - 1) at positions `stream` (int64) of source `source`'s stream of passes."""
    passes, within = np.divmod(stream, length)
    bits = (length - 1).bit_length()
    state, odds = _source_keys(seed, source)
    first = int(passes[0]) if len(passes) else 0
    one_pass = bool((passes == first).all())  # the common case: keys in Python ints, walked as they are
    rounds = _rounds(_mix(state ^ first) if one_pass else _mix(np.uint64(state) ^ passes.astype(np.uint64)),
                     odds, bits)
    rows = _bijection(within.astype(np.uint64), rounds, bits)
    outside = rows >= length
    while outside.any():  # cycle-walk into 0 .. length - 1: still one permutation of them
        walking = rounds if one_pass else [(xor[outside], odd) for xor, odd in rounds]
        rows[outside] = _bijection(rows[outside], walking, bits)
        outside = rows >= length
    return rows.astype(np.int64)


def stream_row(position: int, length: int, seed: int, source: int) -> int:
    """`stream_rows` of one position, in Python ints."""
    number, row = divmod(position, length)
    bits = (length - 1).bit_length()
    state, odds = _source_keys(seed, source)
    rounds = _rounds(_mix(state ^ number), odds, bits)
    row = _bijection(row, rounds, bits)
    while row >= length:
        row = _bijection(row, rounds, bits)
    return row


@functools.lru_cache(maxsize=256)
def _source_keys(seed: int, source: int) -> tuple[int, tuple[int, ...]]:
    """Source `source`'s key, and each round's odd multiplier."""
    state = _mix(_mix(seed) ^ source)
    odds = []
    for _ in range(_ROUNDS):
        odds.append(_mix(odds[-1] if odds else state) | 1)
    return state, tuple(odds)


def _rounds(pass_keys, odds: tuple[int, ...], bits: int) -> list[tuple]:
    """Each round's (xor key, odd multiplier) of `bits`-bit numbers for passes keyed `pass_keys`."""
    mask = (1 << bits) - 1
    return [((pass_keys >> (8 * number)) & mask, odd) for number, odd in enumerate(odds)]


def _bijection(values, rounds: list[tuple], bits: int):
    """A keyed permutation of 0 .. 2^bits - 1 (a Python int or uint64 array): xor, multiply by an odd
    number and xor-shift right, each a bijection of `bits`-bit numbers (Kensler's hash for permutations)."""
    mask = (1 << bits) - 1
    shift = max(1, bits // 2)
    for xor, odd in rounds:
        values = ((values ^ xor) * odd) & mask
        values ^= values >> shift
    return values


def _mix(value):
    """splitmix64's step, of a Python int or a uint64 array: each bit of the result depends on every
    bit of the value (and 0 does not give 0)."""
    if isinstance(value, int):
        value = (value + _GAMMA) & _MASK64
        value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
        return value ^ (value >> 31)
    value = value + np.uint64(_GAMMA)
    value = (value ^ (value >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    value = (value ^ (value >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return value ^ (value >> np.uint64(31))
