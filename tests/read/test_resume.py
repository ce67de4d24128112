"""Training runs that resume exactly: ShardedDataLoader and ShardedSampler checkpoints.

The property test interrupts a run after k consumed batches, resumes it from the state
saved then (on the same or another number of ranks, across an epoch boundary) and
checks the samples of both parts against an uninterrupted run: in order on one rank,
and as a multiset (each sample once, plus the padding the split needs) on several.
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_shards import Array, ClassLabel, Features, Image, ShardedDataset, ShardedSampler, Value, write_shards
from _support import png

torch = pytest.importorskip("torch")
from beam_shards import ShardedDataLoader  # noqa: E402  (imports torch)

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(300)]  # DataLoader worker processes

EPOCHS = 2


class Numbers:
    """A map-style dataset whose sample i is i: what a run read is the list of what it got."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def _flat(batches) -> list[int]:
    return [int(x) for batch in batches for x in (batch if batch.ndim else [batch])]


def _loader(dataset, sampler, options: dict) -> ShardedDataLoader:
    return ShardedDataLoader(dataset, sampler=sampler, **options)


def _options(batch_size: int, num_workers: int, prefetch_factor: int, persistent: bool, drop_last: bool) -> dict:
    options = {"batch_size": batch_size, "num_workers": num_workers, "drop_last": drop_last}
    if num_workers:
        options.update(prefetch_factor=prefetch_factor, persistent_workers=persistent)
    return options


def _train(loader: ShardedDataLoader, sampler: ShardedSampler, stop_after: int | None = None):
    """README's loop over EPOCHS epochs; returns (samples read, state saved after `stop_after` batches)."""
    read, consumed = [], 0
    for epoch in range(sampler.epoch, EPOCHS):
        sampler.set_epoch(epoch)
        for batch in loader:
            read += _flat([batch])
            consumed += 1
            if consumed == stop_after:
                return read, loader.state_dict()
    return read, None


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 40), batch_size=st.integers(1, 7), num_workers=st.sampled_from([0, 1, 2, 4]),
       prefetch_factor=st.sampled_from([1, 2, 4]), persistent=st.booleans(), drop_last=st.booleans(),
       shuffle=st.booleans(), block_size=st.sampled_from([None, 3]), data=st.data())
def test_one_rank_resumes_with_exactly_the_rest_in_order(n, batch_size, num_workers, prefetch_factor, persistent,
                                                        drop_last, shuffle, block_size, data):
    options = _options(batch_size, num_workers, prefetch_factor, persistent, drop_last)
    dataset = Numbers(n)

    def sampler() -> ShardedSampler:
        return ShardedSampler(dataset, seed=7, shuffle=shuffle, block_size=block_size)

    first = sampler()  # the uninterrupted run, read without workers: workers keep the sampler's order
    whole, _ = _train(_loader(dataset, first, _options(batch_size, 0, prefetch_factor, persistent, drop_last)), first)
    per_epoch = n // batch_size if drop_last else -(-n // batch_size)
    if per_epoch == 0:
        return
    k = data.draw(st.integers(1, EPOCHS * per_epoch), label="k")  # k == per_epoch: at the epoch's very end
    interrupted = sampler()
    before, state = _train(_loader(dataset, interrupted, options), interrupted, stop_after=k)
    assert state is not None and state["batches"] == (k - 1) % per_epoch + 1
    resumed = sampler()
    loader = _loader(dataset, resumed, options)
    loader.load_state_dict(state)
    after, _ = _train(loader, resumed)
    assert before + after == whole


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 60), batch_size=st.integers(1, 5), world_before=st.integers(1, 4),
       world_after=st.integers(1, 4), num_workers=st.sampled_from([0, 1]), shuffle=st.booleans(), data=st.data())
def test_another_number_of_ranks_reads_each_remaining_sample_once(n, batch_size, world_before, world_after,
                                                                 num_workers, shuffle, data):
    dataset = Numbers(n)
    options = _options(batch_size, num_workers, 2, False, False)
    per_rank = -(-n // world_before)
    batches = -(-per_rank // batch_size)
    k = data.draw(st.integers(0, batches), label="k")  # batches each rank consumed before the stop
    before, state = [], None
    for rank in range(world_before):
        sampler = ShardedSampler(dataset, seed=3, shuffle=shuffle, rank=rank, world_size=world_before)
        loader = _loader(dataset, sampler, options)
        iterator = iter(loader)
        for _ in range(k):
            before += _flat([next(iterator)])
        if rank == 0:
            state = loader.state_dict()
    after = []
    for rank in range(world_after):
        sampler = ShardedSampler(dataset, seed=3, shuffle=shuffle, rank=rank, world_size=world_after)
        loader = _loader(dataset, sampler, options)
        loader.load_state_dict(state)
        epoch = sampler.epoch
        after += _flat(list(loader)) if epoch == 0 else []
    covered = min(n, world_before * min(k * batch_size, per_rank))
    rest = n - covered
    padding = (world_before * min(k * batch_size, per_rank) - covered) + (-(-rest // world_after) * world_after - rest)
    counts = collections.Counter(before + after)
    assert set(counts) == set(range(n)), "a sample of the epoch was lost"
    assert len(before) + len(after) == n + padding, "more repeats than the split's padding"


def test_elastic_resume_with_drop_last_repeats_nothing():
    dataset = Numbers(50)
    seen = []
    samplers = [ShardedSampler(dataset, seed=1, rank=r, world_size=4, drop_last=True) for r in range(4)]
    for sampler in samplers:
        iterator = iter(sampler)
        seen += [next(iterator) for _ in range(5)]
    state = samplers[0].state_dict()
    for rank in range(3):
        resumed = ShardedSampler(dataset, seed=1, rank=rank, world_size=3, drop_last=True)
        resumed.load_state_dict(state)
        seen += list(resumed)
    assert len(seen) == len(set(seen)) and len(set(range(50)) - set(seen)) < 3 + 4


def test_readme_loop_order_keeps_the_loaded_position():
    """set_epoch after load_state_dict, as README's loop calls it, does not restart the epoch."""
    dataset = Numbers(100)
    loader = ShardedDataLoader(dataset, sampler=ShardedSampler(dataset, seed=0), batch_size=8, num_workers=2)
    read, state = _train(loader, loader.sampler, stop_after=4)
    sampler = ShardedSampler(dataset, seed=0)
    resumed = ShardedDataLoader(dataset, sampler=sampler, batch_size=8, num_workers=2)
    resumed.load_state_dict(state)
    sampler.set_epoch(0)
    rest = _flat(list(resumed))
    assert len(read) == 32 and len(rest) == 68 and sorted(read + rest) == list(range(100))


def test_a_state_saved_at_an_epochs_end_resumes_at_the_next_epoch():
    dataset = Numbers(10)
    sampler = ShardedSampler(dataset, seed=0)
    loader = ShardedDataLoader(dataset, sampler=sampler, batch_size=5)
    epoch0 = _flat(list(loader))
    state = loader.state_dict()
    assert state["sampler"]["epoch"] == 1 and state["sampler"]["position"] == 0
    assert sampler.state_dict()["epoch"] == 1
    resumed = ShardedSampler(dataset, seed=0)
    resumed.load_state_dict(state["sampler"])
    expected = ShardedSampler(dataset, seed=0)
    expected.set_epoch(1)
    assert resumed.epoch == 1 and list(resumed) == list(expected) != epoch0


def test_breaking_out_and_iterating_again_continues_after_the_consumed_batches():
    dataset = Numbers(40)
    loader = ShardedDataLoader(dataset, sampler=ShardedSampler(dataset, seed=2), batch_size=4, num_workers=2)
    whole = _flat(list(ShardedDataLoader(dataset, sampler=ShardedSampler(dataset, seed=2), batch_size=4)))
    first = []
    for batch in loader:
        first += _flat([batch])
        if len(first) == 12:
            break
    assert first + _flat(list(loader)) == whole


@pytest.mark.parametrize("change, match", [
    ({"seed": 1}, "seed 0"), ({"shuffle": False}, "shuffle True"), ({"block_size": 4}, "block_size None"),
    ({"drop_last": True}, "drop_last False"), ({"n": 11}, "num_samples 10"),
])
def test_a_state_of_another_order_is_refused(change, match):
    saved = ShardedSampler(10, seed=0).state_dict()
    options = {"seed": 0, "shuffle": True, "block_size": None, "drop_last": False} | change
    n = options.pop("n", 10)
    with pytest.raises(ValueError, match=f"another order: .*{match}"):
        ShardedSampler(n, **options).load_state_dict(saved)


def test_a_state_of_another_cache_version_or_view_is_refused(tmp_path):
    path = str(tmp_path / "cache")
    features = Features({"x": Value("int64")})
    write_shards(({"x": i} for i in range(20)), path, features)
    state = ShardedSampler(ShardedDataset(path)).state_dict()
    ShardedSampler(ShardedDataset(path)).load_state_dict(state)
    with pytest.raises(ValueError, match="another order: dataset"):
        ShardedSampler(ShardedDataset(path)[:20:1][::-1]).load_state_dict(state)
    write_shards(({"x": i} for i in range(20)), path, features)  # version 2: the same length, other rows
    with pytest.raises(ValueError, match="version 1.*this sampler: .*version 2"):
        ShardedSampler(ShardedDataset(path)).load_state_dict(state)


@pytest.mark.parametrize("state, match", [
    ({"epoch": 0, "seed": 0, "position": 0, "num_samples": 10, "world_size": 1, "rank": 0}, "format"),
    ([1, 2], "a dict"),
    ("position 3", "a dict"),
])
def test_what_is_not_a_sampler_state_is_refused(state, match):
    with pytest.raises(ValueError, match=match):
        ShardedSampler(10).load_state_dict(state)


@pytest.mark.parametrize("edit, match", [
    ({"position": 11}, "past the epoch"), ({"offset": 11}, "past the epoch"), ({"position": -1}, "at least 0"),
    ({"world_size": 0}, "at least 1"),
])
def test_a_damaged_state_is_refused(edit, match):
    state = ShardedSampler(10).state_dict() | edit
    with pytest.raises(ValueError, match=match):
        ShardedSampler(10).load_state_dict(state)


@pytest.mark.parametrize("seed", [-1, 2**63, 2**80])
def test_bad_seeds_are_refused_when_the_sampler_is_made(seed):
    with pytest.raises(ValueError, match="seed"):
        ShardedSampler(10, seed=seed)


def test_the_loader_takes_only_a_sharded_sampler_and_no_batch_sampler():
    dataset = Numbers(10)
    with pytest.raises(TypeError, match="ShardedSampler"):
        ShardedDataLoader(dataset, sampler=torch.utils.data.SequentialSampler(dataset))
    with pytest.raises(TypeError, match="batch_sampler"):
        ShardedDataLoader(dataset, batch_sampler=[[0, 1]])
    with pytest.raises(ValueError, match="shuffle"):
        ShardedDataLoader(dataset, sampler=ShardedSampler(dataset), shuffle=True)
    with pytest.raises(ValueError, match="ShardedDataLoader state"):
        ShardedDataLoader(dataset).load_state_dict(ShardedSampler(dataset).state_dict())
    assert _flat(list(ShardedDataLoader(dataset, batch_size=3))) == list(range(10))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_torchdata_stateful_data_loader_drives_the_sampler_exactly(num_workers):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    dataset = Numbers(50)

    def loader():
        return stateful.StatefulDataLoader(dataset, sampler=ShardedSampler(dataset, seed=4), batch_size=4,
                                           num_workers=num_workers)

    whole = _flat(list(loader()))
    interrupted, before = loader(), []
    for batch in interrupted:
        before += _flat([batch])
        if len(before) == 20:
            state = interrupted.state_dict()
            break
    resumed = loader()
    resumed.load_state_dict(state)
    assert before + _flat(list(resumed)) == whole


# writable arrays ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def array_cache(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("arrays") / "cache")
    features = Features({"bbox": Array((4,), "float32"), "image": Image(), "label": ClassLabel(num_classes=3),
                         "frames": Array((None, 2), "int32")})
    write_shards(({"bbox": np.arange(4, dtype=np.float32) + i, "image": png(i), "label": i % 3,
                   "frames": np.ones((i % 3 + 1, 2), dtype=np.int32)} for i in range(12)), path, features)
    return path


def test_arrays_are_writable_by_default(array_cache):
    dataset = ShardedDataset(array_cache, image_mode="numpy")
    for row in [dataset[3], *dataset.__getitems__([1, 5])]:
        row["bbox"] *= 64
        row["image"][0, 0] = 0
        row["frames"][0] = 7
    assert dataset[3]["bbox"].tolist() == [3.0, 4.0, 5.0, 6.0], "writing a copy changed the cache's rows"


def test_writable_false_gives_read_only_views(array_cache):
    dataset = ShardedDataset(array_cache, writable=False)
    assert not dataset[3]["bbox"].flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        dataset[3]["bbox"] *= 64
    assert "writable=False" in repr(dataset)


def test_a_data_loader_over_arrays_gives_no_not_writable_warning(array_cache):
    dataset = ShardedDataset(array_cache, columns=["bbox", "frames", "label"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = list(ShardedDataLoader(dataset, batch_size=1))
    assert len(batches) == 12 and batches[0]["bbox"].shape == (1, 4)


@pytest.mark.parametrize("stop_after", [4, 7, 9])
def test_breaking_out_late_in_an_epoch_and_iterating_again_continues_that_epoch(stop_after):
    """Breaking within the batches the workers already took to the epoch's end (7 and 9 of 10 here) must not skip
    the rest of the epoch, though the sampler already moved to the next."""
    dataset = Numbers(20)
    options = {"batch_size": 2, "num_workers": 2, "prefetch_factor": 4}
    whole = _flat(list(ShardedDataLoader(dataset, sampler=ShardedSampler(dataset, seed=6), batch_size=2)))
    loader = ShardedDataLoader(dataset, sampler=ShardedSampler(dataset, seed=6), **options)
    seen = []
    for batch in loader:
        seen += _flat([batch])
        if len(seen) == 2 * stop_after:
            break
    assert loader.state_dict()["sampler"]["position"] == 2 * stop_after
    assert seen + _flat(list(loader)) == whole


def test_a_set_epoch_after_a_break_is_the_users_choice():
    dataset = Numbers(20)
    sampler = ShardedSampler(dataset, seed=6)
    loader = ShardedDataLoader(dataset, sampler=sampler, batch_size=2, num_workers=2)
    for _ in loader:
        break
    sampler.set_epoch(3)
    expected = ShardedSampler(dataset, seed=6)
    expected.set_epoch(3)
    assert _flat(list(loader)) == list(expected)
