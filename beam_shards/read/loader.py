"""`ShardedDataLoader`: a torch DataLoader whose checkpoints count the batches the loop consumed.

The only module of the package that imports torch; `beam_shards.ShardedDataLoader` loads
it on first use.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from beam_shards.read.saved_state import check_shape, state_int
from beam_shards.read.sampler import ShardedSampler

STATE_FORMAT = "beam_shards.ShardedDataLoader/1"


class ShardedDataLoader(DataLoader):
    """A torch `DataLoader` over a `ShardedSampler` whose `state_dict()` resumes exactly.

    Worker processes prefetch: when the loop has consumed k batches, the sampler has
    already handed out up to `num_workers * prefetch_factor` batches more. This loader
    counts the batches it hands to the loop, so a state saved after k batches resumes
    with batch k + 1, for any `num_workers`, `prefetch_factor`, `persistent_workers`,
    `batch_size` and `drop_last`. A state saved when an epoch ended resumes at the next
    epoch's start; one saved on another number of ranks resumes elastically (see
    `ShardedSampler.load_state_dict`). `state_dict()` / `load_state_dict()` follow
    torchdata's `StatefulDataLoader`: they speak of the batches the last iterator
    yielded, and the next iterator continues after them.

    Example:
        >>> sampler = ShardedSampler(ds, seed=0, rank=rank, world_size=world_size)  # doctest: +SKIP
        >>> loader = ShardedDataLoader(ds, sampler=sampler, batch_size=256, num_workers=8)  # doctest: +SKIP
        >>> loader.load_state_dict(checkpoint["loader"])  # when resuming  # doctest: +SKIP
        >>> for epoch in range(sampler.epoch, epochs):  # doctest: +SKIP
        ...     sampler.set_epoch(epoch)   # keeps a loaded position within its epoch
        ...     for batch in loader:
        ...         checkpoint["loader"] = loader.state_dict()

    Args:
      dataset: a map-style dataset (a `ShardedDataset`, or anything with `__getitem__`
        and `__len__`).
      sampler: the `ShardedSampler` giving the order; by default one over `dataset`,
        shuffled when `shuffle` is True (seed 0, one rank).
      shuffle: only without `sampler`.
      **options: any other `DataLoader` option (`batch_size`, `num_workers`,
        `prefetch_factor`, `persistent_workers`, `drop_last`, `collate_fn`, ...),
        except `batch_sampler`.

    Raises:
      TypeError: `sampler` is not a `ShardedSampler`, or `batch_sampler` is given.
      ValueError: `shuffle` beside a `sampler`; in `load_state_dict`, a state that is not a
        loader state or is of another order (see `ShardedSampler.load_state_dict`).
    """

    def __init__(self, dataset: Any, *, sampler: ShardedSampler | None = None, shuffle: bool | None = None,
                 **options: Any):
        if options.get("batch_sampler") is not None:
            raise TypeError("ShardedDataLoader counts indices in batches of batch_size; it takes no batch_sampler")
        if sampler is None:
            sampler = ShardedSampler(dataset, shuffle=bool(shuffle))
        elif shuffle is not None:
            raise ValueError("give shuffle to the ShardedSampler, not beside it")
        if not isinstance(sampler, ShardedSampler):
            raise TypeError(f"ShardedDataLoader needs a ShardedSampler; got {type(sampler).__name__}")
        super().__init__(dataset, sampler=sampler, **options)
        self._base: dict[str, Any] = sampler.state_dict()  # the sampler's state when the last iterator began
        self._consumed = 0  # batches the last iterator handed to the loop
        self._finished = False
        self._started = False  # an iterator began since the last load_state_dict
        self._generation = sampler.generation  # the sampler's generation when it began

    def __repr__(self) -> str:
        return (f"ShardedDataLoader({self.sampler!r}, batch_size={self.batch_size}, num_workers={self.num_workers}, "
                f"drop_last={self.drop_last})")

    def __iter__(self) -> Iterator[Any]:
        sampler: ShardedSampler = self.sampler
        if self._started and not self._finished and sampler.generation == self._generation:
            # The last iterator stopped early and nobody moved the sampler since: its workers took
            # more indices than the loop consumed (to the epoch's end, even), so go back to those.
            sampler.load_state_dict(self.state_dict()["sampler"])
        self._base, self._consumed, self._finished, self._started = sampler.state_dict(), 0, False, True
        self._generation = sampler.generation
        for batch in super().__iter__():
            self._consumed += 1
            yield batch
        self._finished = True

    def state_dict(self) -> dict[str, Any]:
        """Where the loop stands: the sampler's state after the batches the loop consumed."""
        sampler: ShardedSampler = self.sampler
        if self._finished or sampler.generation != self._generation:
            # The epoch ended, or the user moved the sampler (set_epoch) since the last iterator
            # began: the next iterator starts where the sampler stands.
            state = sampler.state_dict()
        else:
            state = sampler.state_after(self._base, self._consumed * (self.batch_size or 1))
        return {"format": STATE_FORMAT, "sampler": state, "batches": self._consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state` (from `state_dict`, on any number of ranks): the next iterator yields
        the rest of that epoch.

        Raises:
          ValueError: not a whole loader state (a key missing or unknown, a value of the wrong
            type: the key is named), or one of another order.
        """
        state = check_shape(state, "ShardedDataLoader", STATE_FORMAT, ("format", "sampler", "batches"))
        state_int(state, "batches", "ShardedDataLoader")
        sampler: ShardedSampler = self.sampler
        try:
            sampler.load_state_dict(state["sampler"])
        except ValueError as error:
            raise ValueError(f"ShardedDataLoader state 'sampler': {error}") from None
        self._base, self._consumed, self._finished, self._started = sampler.state_dict(), 0, False, False
        self._generation = sampler.generation
