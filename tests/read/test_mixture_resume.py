"""Mixtures resume exactly: on the same or another number of ranks, across an epoch's end, and through
DataLoader workers that hold their own copy of the mixture."""

from __future__ import annotations

import collections
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_shards import Mixture, ShardedSampler

from test_mixture import FEATURES, write
from test_resume import EPOCHS, _train, torch

from beam_shards import ShardedDataLoader  # noqa: E402  (imports torch)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("mixture_resume")
    return [write(str(root / name), 100 * number, size, FEATURES) for number, (name, size) in
            enumerate({"a": 6, "b": 30, "c": 3}.items())]


def _take(sampler: ShardedSampler, count: int) -> list[int]:
    """The next `count` indices the sampler hands out, into the next epochs when one ends."""
    taken, iterator = [], iter(sampler)
    while len(taken) < count:
        try:
            taken.append(next(iterator))
        except StopIteration:
            iterator = iter(sampler)
    return taken


def _to_the_end(sampler: ShardedSampler) -> list[int]:
    rest = []
    while sampler.epoch < EPOCHS:
        rest += list(sampler)
    return rest


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(weights=st.lists(st.integers(1, 5), min_size=1, max_size=3), epoch_size=st.integers(1, 40),
       shuffle=st.booleans(), world_before=st.integers(1, 3), world_after=st.integers(1, 3), data=st.data())
def test_a_resumed_mixture_reads_the_rest_of_an_uninterrupted_run(paths, weights, epoch_size, shuffle, world_before,
                                                                 world_after, data):
    mixture = Mixture(dict(zip(paths, weights)), epoch_size=epoch_size, seed=9)

    def sampler(rank: int, world: int) -> ShardedSampler:
        return ShardedSampler(mixture, seed=2, shuffle=shuffle, rank=rank, world_size=world)

    per_rank = len(sampler(0, world_before))
    taken = data.draw(st.integers(0, EPOCHS * per_rank - 1), label="indices each rank took")
    before, state = [], None
    for rank in range(world_before):
        interrupted = sampler(rank, world_before)
        before.append(_take(interrupted, taken))
        state = state or interrupted.state_dict()
    after = []
    for rank in range(world_after):
        resumed = sampler(rank, world_after)
        resumed.load_state_dict(state)
        after.append(_to_the_end(resumed))
    if world_before == world_after == 1:  # exactly the rest of the run, in order
        assert before[0] + after[0] == _take(sampler(0, 1), EPOCHS * per_rank)
        return
    stopped = state["epoch"]
    epoch = range(stopped * epoch_size, (stopped + 1) * epoch_size)
    read = collections.Counter(i for part in before + after for i in part if i in epoch)
    assert set(read) == set(epoch), "an index of the epoch was lost"
    assert sum(read.values()) < epoch_size + world_before + world_after, "more repeats than the splits' padding"
    later = [i for part in after for i in part if i >= epoch.stop]
    fresh = [sampler(rank, world_after) for rank in range(world_after)]
    for fresh_sampler in fresh:
        fresh_sampler.set_epoch(stopped + 1)
    assert sorted(later) == sorted(i for s in fresh for i in _to_the_end(s)), "the next epochs changed"
    rows = mixture.__getitems__(sorted(read))
    assert collections.Counter(row["source"] for row in rows) == {
        path: count for path, count in mixture.rows_per_epoch.items() if count}, "the epoch's proportions changed"
    assert pickle.loads(pickle.dumps(mixture)).__getitems__(later) == mixture.__getitems__(later)


def codes(rows: list[dict]):
    """A batch as the tensor of its rows' x (unique across the test's caches)."""
    return torch.tensor([row["x"] for row in rows])


@pytest.mark.subprocess
def test_data_loader_workers_read_each_epochs_rows_and_resume_exactly(paths):
    mixture = Mixture({paths[0]: 1, paths[1]: 2}, epoch_size=18, seed=4)  # 12 of b's 30 rows an epoch
    options = {"batch_size": 4, "num_workers": 2, "persistent_workers": True, "collate_fn": codes}
    expected_sampler = ShardedSampler(mixture, seed=1)
    expected = [[row["x"] for row in mixture.__getitems__(list(expected_sampler))] for _ in range(EPOCHS)]
    sampler = ShardedSampler(mixture, seed=1)
    whole, _ = _train(ShardedDataLoader(mixture, sampler=sampler, **options), sampler)
    assert whole == expected[0] + expected[1] and sorted(expected[0]) != sorted(expected[1])
    interrupted = ShardedSampler(mixture, seed=1)
    before, state = _train(ShardedDataLoader(mixture, sampler=interrupted, **options), interrupted, stop_after=6)
    resumed = ShardedSampler(mixture, seed=1)
    loader = ShardedDataLoader(mixture, sampler=resumed, **options)
    loader.load_state_dict(state)
    after, _ = _train(loader, resumed)
    assert state["sampler"]["epoch"] == 1 and before + after == whole
    assert np.isin(whole, [100 + i for i in range(30)]).sum() == 24
