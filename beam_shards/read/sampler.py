"""`ShardedSampler`: the order a training run reads a dataset in, reproducible and resumable."""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sized
from typing import Any

import numpy as np

_STATE_KEYS = ("epoch", "seed", "position", "num_samples", "world_size", "rank")


class ShardedSampler:
    """Yields dataset indices for one rank, in an order that depends only on (seed, epoch).

    A torch sampler (`DataLoader(ds, sampler=..., batch_size=...)`, any number of
    workers) without importing torch. Ranks split each epoch as torch's
    `DistributedSampler` does: the epoch's order is padded by repeating its start (or
    cut, with `drop_last`) to a multiple of `world_size`, and rank r takes positions
    r, r + world_size, ... `state_dict()` records how many indices this rank has
    yielded in the current epoch; `load_state_dict()` continues exactly after them.
    With `block_size`, the order shuffles blocks of `block_size` neighbouring rows and
    then the rows inside each block, so consecutive reads stay within a few record
    batches (a big saving on an object store) while every epoch still differs.

    Example:
        >>> sampler = ShardedSampler(10, seed=1)
        >>> first = list(sampler)
        >>> sorted(first) == list(range(10))
        True
        >>> it = iter(ShardedSampler(10, seed=1)); _ = [next(it) for _ in range(4)]
        >>> state = {"epoch": 0, "seed": 1, "position": 4, "num_samples": 10, "world_size": 1, "rank": 0}
        >>> resumed = ShardedSampler(10, seed=1); resumed.load_state_dict(state)
        >>> list(resumed) == first[4:]
        True

    Args:
      dataset_or_len: the dataset (anything with `len`) or its length.
      shuffle: shuffle each epoch; False gives 0, 1, 2, ... split across ranks.
      seed: the seed; the same (seed, epoch) gives the same order on every machine.
      rank: this process's rank, 0 <= rank < world_size.
      world_size: how many ranks share each epoch.
      drop_last: drop the tail that does not divide evenly among ranks instead of
        padding with repeated indices.
      block_size: shuffle blocks of this many neighbouring rows, then the rows in each.

    Raises:
      TypeError: an argument of the wrong type (the value is named).
      ValueError: a negative length, a rank outside 0..world_size-1, a world_size or
        block_size below 1; in `load_state_dict`, a state for another dataset length,
        seed or world, or a position past the epoch.
    """

    def __init__(self, dataset_or_len: Sized | int, *, shuffle: bool = True, seed: int = 0, rank: int = 0,
                 world_size: int = 1, drop_last: bool = False, block_size: int | None = None):
        length = dataset_or_len if _is_int(dataset_or_len) else _length(dataset_or_len)
        self.num_samples = _int(length, "dataset length", low=0)
        self.world_size = _int(world_size, "world_size", low=1)
        self.rank = _int(rank, "rank", low=0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be in 0..{self.world_size - 1} for world_size {self.world_size}; got {rank}")
        self.seed = _int(seed, "seed")
        self.block_size = None if block_size is None else _int(block_size, "block_size", low=1)
        if not isinstance(shuffle, bool) or not isinstance(drop_last, bool):
            raise TypeError(f"shuffle and drop_last must be bools; got {shuffle!r} and {drop_last!r}")
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.epoch = 0
        self._position = 0

    def __repr__(self) -> str:
        return (f"ShardedSampler(num_samples={self.num_samples}, shuffle={self.shuffle}, seed={self.seed}, "
                f"rank={self.rank}, world_size={self.world_size}, drop_last={self.drop_last}, "
                f"block_size={self.block_size}, epoch={self.epoch})")

    def __len__(self) -> int:
        """How many indices this rank yields per epoch."""
        if self.drop_last:
            return self.num_samples // self.world_size
        return -(-self.num_samples // self.world_size)

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch `epoch` (from its beginning) on the next iteration."""
        self.epoch = _int(epoch, "epoch", low=0)
        self._position = 0

    def __iter__(self) -> Iterator[int]:
        mine = self.epoch_indices()
        start, self._position = self._position, 0
        for position in range(start, len(mine)):
            self._position = position + 1
            yield int(mine[position])
        self._position = 0

    def epoch_indices(self) -> np.ndarray:
        """This rank's indices for the current epoch, in order."""
        order = self._order()
        total = len(self) * self.world_size
        if total > len(order):  # pad with the start of the order, as DistributedSampler does
            order = np.resize(order, total)
        return order[self.rank:total:self.world_size]

    def _order(self) -> np.ndarray:
        n = self.num_samples
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        rng = np.random.default_rng([self.seed, self.epoch])
        if self.block_size is None or self.block_size >= n:
            return _shuffled_block(rng, 0, n)
        starts = rng.permutation(np.arange(0, n, self.block_size))
        return np.concatenate([_shuffled_block(rng, s, min(s + self.block_size, n)) for s in starts.tolist()])

    def state_dict(self) -> dict[str, Any]:
        """Where this rank is: the epoch and how many of its indices it has yielded (plus what they depend on)."""
        return {"epoch": self.epoch, "seed": self.seed, "position": self._position, "num_samples": self.num_samples,
                "world_size": self.world_size, "rank": self.rank}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state` (from `state_dict`): the next iteration yields the rest of that epoch.

        Raises:
          ValueError: the state is for another length, seed, world or rank, lacks a
            key, or its position is past the epoch's end.
        """
        missing = [key for key in _STATE_KEYS if key not in state]
        if missing:
            raise ValueError(f"sampler state lacks {missing}; got keys {sorted(state)}")
        mine = {"seed": self.seed, "num_samples": self.num_samples, "world_size": self.world_size, "rank": self.rank}
        differ = {key: (state[key], value) for key, value in mine.items() if state[key] != value}
        if differ:
            shown = ", ".join(f"{key} {saved!r} (this sampler: {value!r})" for key, (saved, value) in differ.items())
            raise ValueError(f"sampler state is for another run: {shown}")
        epoch = _int(state["epoch"], "epoch", low=0)
        position = _int(state["position"], "position", low=0)
        if position > len(self):
            raise ValueError(f"sampler state position {position} is past the epoch's {len(self)} indices")
        self.epoch, self._position = epoch, position


def _shuffled_block(rng: np.random.Generator, start: int, stop: int) -> np.ndarray:
    return start + rng.permutation(stop - start).astype(np.int64)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _length(dataset: Any) -> int:
    try:
        return len(dataset)
    except TypeError:
        raise TypeError(f"ShardedSampler takes a dataset with a length or an int; got {type(dataset).__name__}") from None


def _int(value: Any, what: str, low: int | None = None) -> int:
    if not _is_int(value):
        raise TypeError(f"{what} must be an int; got {value!r}")
    value = operator.index(value)
    if low is not None and value < low:
        raise ValueError(f"{what} must be at least {low}; got {value}")
    return value
