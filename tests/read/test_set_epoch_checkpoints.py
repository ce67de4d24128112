"""A checkpoint taken after `set_epoch(e)` and before that epoch's first batch resumes epoch e from its start.

Each run reads EPOCHS epochs with README's loop, takes a state right after one `set_epoch`, and
compares what a run resumed from it reads with what the uninterrupted run read from there on: the
same rows in the same order, none lost or repeated, with and without `drop_last`.
"""

from __future__ import annotations

import pytest

from beam_shards import ShardedSampler

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from beam_shards import ShardedDataLoader  # noqa: E402  (imports torch)

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(300)]  # DataLoader worker processes

EPOCHS = 3
ROWS = 50  # more than the batches two workers prefetch, so every epoch outlasts the prefetch window
BATCH = 4


class Numbers:
    """A map-style dataset whose sample i is i."""

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, index: int) -> int:
        return index


def _make(kind: str, num_workers: int, drop_last: bool):
    sampler = ShardedSampler(Numbers(), seed=3)
    options = {"batch_size": BATCH, "num_workers": num_workers, "drop_last": drop_last}
    if kind == "sharded":
        return sampler, ShardedDataLoader(Numbers(), sampler=sampler, **options)
    if kind == "stateful":
        stateful = pytest.importorskip("torchdata.stateful_dataloader")
        return sampler, stateful.StatefulDataLoader(Numbers(), sampler=sampler, **options)
    return sampler, DataLoader(Numbers(), sampler=sampler, **options)  # the sampler's own state, nothing prefetched


def _save(kind: str, sampler: ShardedSampler, loader) -> dict:
    return sampler.state_dict() if kind == "torch" else loader.state_dict()


def _load(kind: str, sampler: ShardedSampler, loader, state: dict) -> None:
    (sampler if kind == "torch" else loader).load_state_dict(state)


def _rows(loader) -> list[int]:
    return [int(x) for batch in loader for x in batch]


def _uninterrupted(kind, num_workers, drop_last, first_epoch, checkpoint_epoch, break_after):
    """Rows read from the checkpoint on, and the state taken after `set_epoch(checkpoint_epoch)`."""
    sampler, loader = _make(kind, num_workers, drop_last)
    read, state = None, None
    for epoch in range(first_epoch, EPOCHS):
        sampler.set_epoch(epoch)
        if epoch == checkpoint_epoch:
            state, read = _save(kind, sampler, loader), []
        rows = []
        for batch in loader:
            rows += [int(x) for x in batch]
            if epoch == break_after and len(rows) == 2 * BATCH:
                break  # a run that leaves an epoch early and moves on with set_epoch
        if read is not None:
            read += rows
    return read, state


def _resumed(kind, num_workers, drop_last, state, checkpoint_epoch):
    sampler, loader = _make(kind, num_workers, drop_last)
    _load(kind, sampler, loader, state)
    read = []
    # README's loop starts at the loaded epoch; torchdata loads the state only when iterated.
    for epoch in range(checkpoint_epoch if kind == "stateful" else sampler.epoch, EPOCHS):
        sampler.set_epoch(epoch)
        read += _rows(loader)
    return read


@pytest.mark.parametrize("kind", ["sharded", "stateful", "torch"])
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("first_epoch, checkpoint_epoch, break_after", [
    (0, 1, None),  # after an epoch read to its end
    (1, 1, None),  # a run that starts at epoch 1: the loader was made before set_epoch
    (2, 2, None),
    (0, 1, 0),  # after leaving epoch 0 early
])
def test_a_checkpoint_after_set_epoch_resumes_that_epoch_from_its_start(kind, num_workers, drop_last, first_epoch,
                                                                        checkpoint_epoch, break_after):
    if kind == "stateful" and break_after is not None and num_workers:
        pytest.skip("torchdata's state is its last iterator's snapshot, taken before the break and the set_epoch")
    expected, state = _uninterrupted(kind, num_workers, drop_last, first_epoch, checkpoint_epoch, break_after)
    per_epoch = ROWS // BATCH * BATCH if drop_last else ROWS
    assert len(expected) == per_epoch * (EPOCHS - checkpoint_epoch)
    assert _resumed(kind, num_workers, drop_last, state, checkpoint_epoch) == expected


def test_the_loaders_state_after_set_epoch_names_that_epoch():
    """The fault the test above guards against: a loader made before `set_epoch(e)` saved the epoch it was made at."""
    sampler, loader = _make("sharded", 0, False)
    sampler.set_epoch(2)
    state = loader.state_dict()["sampler"]
    assert (state["epoch"], state["position"]) == (2, 0)
    for _ in loader:
        break
    sampler.set_epoch(4)
    state = loader.state_dict()["sampler"]
    assert (state["epoch"], state["position"]) == (4, 0)
