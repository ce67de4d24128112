"""`ShardedSampler`: the order a training run reads a dataset in, reproducible and resumable.

An epoch's order depends only on (seed, epoch). Its samples are handed out in segments:
a segment starts at `offset`, the number of samples of the epoch that all ranks had
consumed when it began (0 for a fresh epoch), and splits the rest of the order among
the ranks as torch's `DistributedSampler` splits a whole epoch. A state records where
its rank stands; loading it starts a new segment at the samples every rank has consumed
by then, so a run resumed on another number of ranks (elastic) still reads each
remaining sample of the epoch once. The arithmetic is pure and lives in `SamplerState`.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterator, Sized
from typing import Any

import numpy as np

from beam_shards.display import clip
from beam_shards.read.row_identity import rows_hint, same_rows
from beam_shards.read.saved_state import check_shape, is_int, same_value, state_int

STATE_FORMAT = "beam_shards.ShardedSampler/2"
# What a state must agree on with the sampler that loads it: the order of every epoch.
_ORDER_KEYS = ("num_samples", "seed", "shuffle", "block_size", "drop_last", "dataset")
# Every key of a state: where its rank stands, and that order.
_STATE_KEYS = ("format", "epoch", "offset", "position", "consumed", "world_size", "rank", *_ORDER_KEYS)
_MAX_SEED = (1 << 63) - 1


@dataclasses.dataclass(frozen=True)
class SamplerState:
    """Where one rank stands in an epoch: `position` of its indices handed out in the segment
    that began after `offset` samples of the epoch, split among `world_size` ranks."""

    epoch: int
    offset: int
    position: int
    world_size: int
    num_samples: int
    drop_last: bool

    def segment_length(self) -> int:
        """How many indices each rank is handed in this segment (padded or cut to split evenly)."""
        remaining = self.num_samples - self.offset
        if self.drop_last:
            return remaining // self.world_size
        return -(-remaining // self.world_size)

    def consumed(self) -> int:
        """Samples of the epoch consumed by all ranks together, padding repeats not counted."""
        return min(self.num_samples, self.offset + self.position * self.world_size)

    def advanced(self, count: int) -> SamplerState:
        """This state after `count` more indices were handed out; past the segment's end, the
        next epoch's start (so a state saved when an epoch ended resumes at the next one)."""
        position = self.position + count
        if position >= self.segment_length():
            return dataclasses.replace(self, epoch=self.epoch + 1, offset=0, position=0)
        return dataclasses.replace(self, position=position)

    def rebased(self, world_size: int) -> SamplerState:
        """A new segment starting at the samples consumed so far, for `world_size` ranks."""
        return dataclasses.replace(self, offset=self.consumed(), position=0, world_size=world_size).normalised()

    def normalised(self) -> SamplerState:
        """The next epoch's start for a state at its segment's end, else this state."""
        return self.advanced(0) if self.position >= self.segment_length() else self


class ShardedSampler:
    """Yields dataset indices for one rank, in an order that depends only on (seed, epoch).

    A torch sampler (`DataLoader(ds, sampler=..., batch_size=...)`, any number of
    workers) without importing torch. Ranks split each epoch as torch's
    `DistributedSampler` does: the epoch's order is padded by repeating its start (or
    cut, with `drop_last`) to a multiple of `world_size`, and rank r takes positions
    r, r + world_size, ... With `block_size`, the order shuffles blocks of
    `block_size` neighbouring rows and then the rows inside each block, so consecutive
    reads stay within a few record batches (a big saving on an object store) while
    every epoch still differs.

    An iteration that runs to its end moves the sampler to the next epoch, so an
    epoch-end state resumes at the next epoch's start and a loop that never calls
    `set_epoch` still gets a new order each epoch. `state_dict()` records how many
    indices this rank has handed out; a DataLoader that prefetches has handed out more
    than the loop consumed, so checkpoint through `ShardedDataLoader` (or torchdata's
    `StatefulDataLoader`), which count consumed batches. `load_state_dict()` takes a
    state saved on any number of ranks: the samples every rank consumed are skipped,
    and the rest of the epoch is split among this sampler's ranks (padded by repeating
    the start of the rest, or cut with `drop_last`).

    Example:
        >>> sampler = ShardedSampler(10, seed=1)
        >>> first = list(sampler)
        >>> sorted(first) == list(range(10))
        True
        >>> it = iter(ShardedSampler(10, seed=1)); _ = [next(it) for _ in range(4)]
        >>> resumed = ShardedSampler(10, seed=1)
        >>> resumed.load_state_dict(ShardedSampler(10, seed=1).state_dict() | {"position": 4})
        >>> list(resumed) == first[4:]
        True

    Args:
      dataset_or_len: the dataset (anything with `len`) or its length. A dataset that
        names its rows (`ShardedDataset.identity`) ties states to those rows in their
        order: the cache version and view, or a version `compact` made of it (the
        same rows); a state of another version is refused naming the version to open.
        A dataset whose rows differ by epoch (`epoch_indexed` True, as a `Mixture`'s)
        reads row i of epoch e at index e * len(dataset) + i: the sampler yields
        those indices, so DataLoader workers, which hold their own copy of the
        dataset, read each epoch's rows.
      shuffle: shuffle each epoch; False gives 0, 1, 2, ... split across ranks.
      seed: the seed, 0 <= seed < 2^63; the same (seed, epoch) gives the same order on
        every machine.
      rank: this process's rank, 0 <= rank < world_size.
      world_size: how many ranks share each epoch.
      drop_last: drop the tail that does not divide evenly among ranks instead of
        padding with repeated indices.
      block_size: shuffle blocks of this many neighbouring rows, then the rows in each.

    Attributes:
      generation: how many times `set_epoch` or `load_state_dict` moved the sampler, so a
        loader tells a user's move from its own iteration's.

    Raises:
      TypeError: an argument of the wrong type (the value is named).
      ValueError: a negative length or seed, a rank outside 0..world_size-1, a
        world_size or block_size below 1; in `load_state_dict`, a state of another
        order (length, seed, shuffle, block_size, drop_last, cache version or view).
    """

    def __init__(self, dataset_or_len: Sized | int, *, shuffle: bool = True, seed: int = 0, rank: int = 0,
                 world_size: int = 1, drop_last: bool = False, block_size: int | None = None):
        length = dataset_or_len if is_int(dataset_or_len) else _length(dataset_or_len)
        self.num_samples = _int(length, "dataset length", low=0)
        self.world_size = _int(world_size, "world_size", low=1)
        self.rank = _int(rank, "rank", low=0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be in 0..{self.world_size - 1} for world_size {self.world_size}; got {rank}")
        self.seed = _int(seed, "seed", low=0, high=_MAX_SEED)
        self.block_size = None if block_size is None else _int(block_size, "block_size", low=1)
        if not isinstance(shuffle, bool) or not isinstance(drop_last, bool):
            raise TypeError(f"shuffle and drop_last must be bools; got {shuffle!r} and {drop_last!r}")
        self.shuffle = shuffle
        self.drop_last = drop_last
        identity = getattr(dataset_or_len, "identity", None)
        self.dataset = identity if isinstance(identity, str) else None
        self._epoch_indexed = getattr(dataset_or_len, "epoch_indexed", False) is True
        self._state = SamplerState(0, 0, 0, self.world_size, self.num_samples, drop_last)
        self._yielded: int | None = None  # indices of the segment handed out by a running iteration
        self._iteration: object | None = None  # that iteration's token
        self.generation = 0

    def __repr__(self) -> str:
        return (f"ShardedSampler(num_samples={self.num_samples}, shuffle={self.shuffle}, seed={self.seed}, "
                f"rank={self.rank}, world_size={self.world_size}, drop_last={self.drop_last}, "
                f"block_size={self.block_size}, epoch={self.epoch})")

    @property
    def epoch(self) -> int:
        return self._current().epoch

    def __len__(self) -> int:
        """How many indices this rank yields in the current segment (a whole epoch unless resumed)."""
        return self._state.segment_length()

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch `epoch` on the next iteration; the current epoch (a loaded state's, or the one
        an iteration to the end moved to) keeps its position."""
        epoch = _int(epoch, "epoch", low=0)
        if epoch != self.epoch:
            self._state = SamplerState(epoch, 0, 0, self.world_size, self.num_samples, self.drop_last)
            self._yielded = self._iteration = None
            self.generation += 1

    def __iter__(self) -> Iterator[int]:
        mine = self.epoch_indices().tolist()
        start = self._state.position
        # The position is kept as a plain int while indices are handed out (a DataLoader asks for
        # tens of thousands a second), and folded into the state when it is asked for or ends. Only
        # the newest iteration may fold it: an abandoned one is closed whenever it is collected.
        token = self._iteration = object()
        self._yielded = start
        try:
            for position in range(start, len(mine)):
                self._yielded = position + 1
                yield mine[position]
        finally:
            if self._iteration is token:
                self._state, self._yielded, self._iteration = self._current(), None, None
        if self._iteration is None and self._yielded is None:
            self._state = self._state.normalised()

    def epoch_indices(self) -> np.ndarray:
        """This rank's indices for the current segment of the current epoch, in order."""
        rest = self._order()[self._state.offset:]
        total = len(self) * self.world_size
        if total > len(rest):  # pad with the start of the rest, as DistributedSampler does
            rest = np.resize(rest, total)
        mine = rest[self.rank:total:self.world_size]
        return mine + self._state.epoch * self.num_samples if self._epoch_indexed else mine

    def _order(self) -> np.ndarray:
        n = self.num_samples
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        rng = np.random.default_rng([self.seed, self._state.epoch])
        if self.block_size is None or self.block_size >= n:
            return _shuffled_block(rng, 0, n)
        starts = rng.permutation(np.arange(0, n, self.block_size))
        return np.concatenate([_shuffled_block(rng, s, min(s + self.block_size, n)) for s in starts.tolist()])

    def state_dict(self) -> dict[str, Any]:
        """Where this rank stands (the epoch, the segment and the indices it handed out), and the order
        it depends on; an epoch handed out to its end is the next epoch's start."""
        return self._state_dict(self._current().normalised())

    def _current(self) -> SamplerState:
        if self._yielded is None:
            return self._state
        return dataclasses.replace(self._state, position=self._yielded)

    def state_after(self, state: dict[str, Any], count: int) -> dict[str, Any]:
        """`state` (from this sampler's `state_dict`) after `count` more of its indices were consumed:
        what a loader that counts consumed batches saves, whatever its workers prefetched."""
        return self._state_dict(self._checked(state).advanced(count))

    def _state_dict(self, state: SamplerState) -> dict[str, Any]:
        return {"format": STATE_FORMAT, "epoch": state.epoch, "offset": state.offset, "position": state.position,
                "consumed": state.consumed(), "world_size": state.world_size, "rank": self.rank,
                "num_samples": self.num_samples, "seed": self.seed, "shuffle": self.shuffle,
                "block_size": self.block_size, "drop_last": self.drop_last, "dataset": self.dataset}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state` (a `state_dict` of any rank of a run on any number of ranks): the next
        iteration yields this rank's share of the rest of that epoch.

        Ranks consume the same number of batches (as distributed training requires), so any
        rank's state says how many samples of the epoch every rank consumed; the rest is split
        among this sampler's ranks. On as many ranks as before, each rank yields what an
        uninterrupted run would have yielded next, but for the padding of an epoch that does
        not split evenly: an uninterrupted epoch pads with its first indices, a resumed one
        with the first of the rest, so other samples are repeated (as many; every sample of
        the epoch is still yielded once besides them). With `drop_last` there is no padding.

        Raises:
          ValueError: the state is not a whole sampler state (a key missing or unknown, a count
            not an int: the key is named), or is of another order (length, seed, shuffle,
            block_size, drop_last, cache version or view).
        """
        self._state = self._checked(state).rebased(self.world_size)
        self._yielded = self._iteration = None
        self.generation += 1

    def _checked(self, state: Any) -> SamplerState:
        state = check_shape(state, "ShardedSampler", STATE_FORMAT, _STATE_KEYS)
        counts = {key: state_int(state, key, "ShardedSampler", low=int(key == "world_size"))
                  for key in ("epoch", "offset", "position", "consumed", "world_size", "rank")}
        mine = {key: getattr(self, key) for key in _ORDER_KEYS}
        differ = {key: (state[key], value) for key, value in mine.items()
                  if not (same_rows if key == "dataset" else same_value)(state[key], value)}
        if differ:
            shown = ", ".join(f"{key} {clip(repr(saved))} (this sampler: {value!r})"
                              for key, (saved, value) in differ.items())
            hint = rows_hint(state["dataset"], self.dataset) if "dataset" in differ else ""
            raise ValueError(f"sampler state is for another order: {shown}{hint}")
        saved = SamplerState(counts["epoch"], counts["offset"], counts["position"], counts["world_size"],
                             self.num_samples, self.drop_last)
        if saved.offset > self.num_samples or saved.position > saved.segment_length():
            raise ValueError(f"sampler state offset {saved.offset} and position {saved.position} are past the epoch "
                             f"of {self.num_samples} samples on {saved.world_size} rank(s)")
        return saved


def _shuffled_block(rng: np.random.Generator, start: int, stop: int) -> np.ndarray:
    return start + rng.permutation(stop - start).astype(np.int64)


def _length(dataset: Any) -> int:
    try:
        return len(dataset)
    except TypeError:
        raise TypeError(f"ShardedSampler takes a dataset with a length or an int; got {type(dataset).__name__}") from None


def _int(value: Any, what: str, low: int | None = None, high: int | None = None) -> int:
    if not is_int(value):
        raise TypeError(f"{what} must be an int; got {value!r}")
    value = operator.index(value)
    if low is not None and value < low:
        raise ValueError(f"{what} must be at least {low}; got {value}")
    if high is not None and value > high:
        raise ValueError(f"{what} must be at most {high}; got {value}")
    return value
