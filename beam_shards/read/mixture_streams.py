"""Which row each position of a mixture's source streams holds (pure arithmetic, Python ints or numpy).

Source s's rows come as an endless stream of passes: position t is row perm(s, pass)(t mod L)
of its L rows, pass = t // L. Each pass's permutation is keyed by (seed, s, pass): a
4-round Feistel network over an a x b grid of cells (a * b >= L, a and b near sqrt(L),
chosen to leave as few cells past L as there can be), cycle-walked into 0 .. L - 1 (a cell
past L is permuted again until it lands below L), so each pass holds each row once.

Walks are rare (at most a / (a * b) of the cells are past L, about 1 / sqrt(L)) and short,
so a batch of positions costs a fixed few dozen numpy steps whatever its size, and one
position a few Python operations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_ROUND_ODDS = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD)
_SHIFT = 33  # a hash is its product's top 31 bits
# The same numbers as 0-d uint64 arrays: numpy steps an array with one of those faster than with a
# Python int or a numpy scalar (a batch of a mixture pays each step, whatever its size)
_NP = {number: np.array(number, dtype=np.uint64) for number in (*_ROUND_ODDS, _SHIFT, _GAMMA, 30, 27, 31)}
_SPREAD = 1024  # grid widths tried on either side of sqrt(L)
_SCALAR_WALKS = 8  # walks left to Python ints once this few remain: a numpy step costs more than one


class SourceStreams:
    """The rows at positions of each source's stream of passes, for one seed.

    Args:
      lengths: each source's rows (>= 1).
      seed: any int; the same (seed, source, pass) gives the same permutation.
    """

    def __init__(self, lengths: Sequence[int], seed: int):
        self._lengths = [int(length) for length in lengths]
        self._grids = [_grid(length) for length in self._lengths]
        self._keys = [_mix(_mix(seed) ^ source) for source in range(len(self._lengths))]
        # [length, key, a, b] of each source, gathered for a batch in one step
        self._table = np.array([self._lengths, self._keys, *zip(*self._grids)], dtype=np.uint64)

    def rows(self, stream: np.ndarray, sources: np.ndarray) -> np.ndarray:
        """The rows (int64) at positions `stream` (int64, >= 0) of the streams of `sources` (one each)."""
        lengths, keys, widths, heights = self._table.take(sources, axis=1)
        passes, within = np.divmod(stream.view(np.uint64), lengths)  # as they are: no position is negative
        keys = _mix(passes ^ keys)
        rows = _feistel_array(within, keys, widths, heights)
        outside = np.flatnonzero(rows >= lengths)
        while len(outside) > _SCALAR_WALKS:
            rows[outside] = _feistel_array(rows[outside], keys[outside], widths[outside], heights[outside])
            outside = outside[rows[outside] >= lengths[outside]]
        for at in outside.tolist():
            rows[at] = _walk(int(rows[at]), int(keys[at]), int(widths[at]), int(heights[at]), int(lengths[at]))
        return rows.view(np.int64)

    def row(self, position: int, source: int) -> int:
        """`rows` of one position of one source, in Python ints (a numpy call costs more than this)."""
        length = self._lengths[source]
        number, within = divmod(position, length)
        width, height = self._grids[source]
        key = _mix(self._keys[source] ^ number)
        value = _feistel(within, key, width, height)
        return value if value < length else _walk(value, key, width, height, length)


def _grid(length: int) -> tuple[int, int]:
    """(a, b): a * b >= length cells with as few past `length` as widths near sqrt(length) give, the
    most even such grid; both at least 2 (a 1-wide grid would only rotate) unless length is 1."""
    if length == 1:
        return 1, 1
    root = math.isqrt(length - 1) + 1
    spread = min(root // 2 + 1, _SPREAD)
    widths = sorted(range(max(2, root - spread), root + spread + 1), key=lambda a: (abs(a - root), a))
    return min(((a, max(2, -(-length // a))) for a in widths), key=lambda grid: grid[0] * grid[1] - length)


def _walk(value: int, key: int, width: int, height: int, length: int) -> int:
    """`value`, permuted until it lands below `length` (cycle-walking: still one permutation)."""
    while value >= length:
        value = _feistel(value, key, width, height)
    return value


def _feistel(value: int, key: int, width: int, height: int) -> int:
    """A keyed permutation of 0 .. a * b - 1: the value as a cell (x, y) of an a x b grid; rounds add
    a keyed hash of y to x (mod a), then of x to y (mod b), each a bijection of the grid. A hash is
    the top bits of a 64-bit product (below 2^31), which depend on all of the coordinate's."""
    x, y = divmod(value, height)
    odd0, odd1, odd2, odd3 = _ROUND_ODDS
    x = (x + ((((y ^ key) * odd0) & _MASK64) >> _SHIFT)) % width
    y = (y + ((((x ^ key) * odd1) & _MASK64) >> _SHIFT)) % height
    x = (x + ((((y ^ key) * odd2) & _MASK64) >> _SHIFT)) % width
    y = (y + ((((x ^ key) * odd3) & _MASK64) >> _SHIFT)) % height
    return x * height + y


def _feistel_array(values: np.ndarray, keys: np.ndarray, widths: np.ndarray, heights: np.ndarray) -> np.ndarray:
    """`_feistel` of uint64 arrays, in place where it can be: a batch of a mixture pays each numpy
    step, whatever its size."""
    x, y = np.divmod(values, heights)
    hashed = np.empty_like(x)
    for number, odd in enumerate(_ROUND_ODDS):
        source, target, modulus = (x, y, heights) if number % 2 else (y, x, widths)
        np.bitwise_xor(source, keys, out=hashed)
        np.multiply(hashed, _NP[odd], out=hashed)
        np.right_shift(hashed, _NP[_SHIFT], out=hashed)
        np.add(target, hashed, out=target)
        np.remainder(target, modulus, out=target)
    np.multiply(x, heights, out=x)
    return np.add(x, y, out=x)


def _mix(value):
    """splitmix64's step, of a Python int or a uint64 array: each bit of the result depends on every
    bit of the value (and 0 does not give 0)."""
    if isinstance(value, int):
        value = (value + _GAMMA) & _MASK64
        value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
        return value ^ (value >> 31)
    value = np.add(value, _NP[_GAMMA])  # a new array, stepped in place from here
    shifted = np.empty_like(value)
    for shift, odd in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, None)):
        np.bitwise_xor(value, np.right_shift(value, _NP[shift], out=shifted), out=value)
        if odd is not None:
            np.multiply(value, _NP[odd], out=value)
    return value
