"""ShardedSampler: order from (seed, epoch) alone, ranks as DistributedSampler, exact resume."""

from __future__ import annotations

import grain
import pytest
from torch.utils.data import DataLoader, DistributedSampler

from beam_shards import ShardedDataset, ShardedSampler, write_shards

from _support import FEATURES, example


def test_order_depends_on_seed_and_epoch_only():
    a, b = ShardedSampler(100, seed=7), ShardedSampler(100, seed=7)
    first = list(a)
    assert first == list(b) and sorted(first) == list(range(100)) and first != list(range(100))
    second = list(a)  # an iteration to the end moved it to epoch 1, and this one to 2
    assert a.epoch == 2 and second != first and sorted(second) == list(range(100))
    b.set_epoch(1)
    assert list(b) == second
    a.set_epoch(0)
    assert list(a) == first
    assert list(ShardedSampler(100, seed=8)) != first
    assert list(ShardedSampler(10, shuffle=False)) == list(range(10))


@pytest.mark.parametrize("n,world,drop_last", [(100, 4, False), (103, 4, False), (103, 4, True), (3, 5, False)])
def test_ranks_split_each_epoch_as_distributed_sampler_does(n, world, drop_last):
    ranks = [ShardedSampler(n, seed=3, rank=r, world_size=world, drop_last=drop_last) for r in range(world)]
    for epoch in (0, 1):
        for sampler in ranks:
            sampler.set_epoch(epoch)
        parts = [list(sampler) for sampler in ranks]
        assert all(len(part) == len(ranks[0]) for part in parts)
        seen = [i for part in parts for i in part]
        if drop_last:
            assert len(seen) == len(set(seen)) == (n // world) * world
        else:
            assert set(seen) == set(range(n)) and len(seen) == -(-n // world) * world
        # The same split and sizes as torch's sampler, for the unshuffled order.
        theirs = [list(DistributedSampler(range(n), num_replicas=world, rank=r, shuffle=False, drop_last=drop_last))
                  for r in range(world)]
        ours = [list(ShardedSampler(n, shuffle=False, rank=r, world_size=world, drop_last=drop_last))
                for r in range(world)]
        assert ours == theirs


def _epoch(epoch: int) -> list[int]:
    sampler = ShardedSampler(100, seed=5, block_size=8)
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("k", [0, 1, 37, 99, 100])
def test_resume_after_k_indices_yields_exactly_the_rest(k):
    sampler = ShardedSampler(100, seed=5, block_size=8)
    sampler.set_epoch(3)
    it = iter(sampler)
    taken = [next(it) for _ in range(k)]
    state = sampler.state_dict()
    at_end = k == 100  # an epoch handed out to its end is the next epoch's start
    assert taken == _epoch(3)[:k] and (state["epoch"], state["position"]) == ((4, 0) if at_end else (3, k))
    resumed = ShardedSampler(100, seed=5, block_size=8)
    resumed.load_state_dict(state)
    assert list(resumed) == (_epoch(4) if at_end else _epoch(3)[k:])
    assert list(resumed) == (_epoch(5) if at_end else _epoch(4))  # then the next epoch


def test_block_size_keeps_neighbours_together():
    sampler = ShardedSampler(1000, seed=1, block_size=100)
    order = list(sampler)
    assert sorted(order) == list(range(1000)) and order != sorted(order)
    blocks = [order[i:i + 100] for i in range(0, 1000, 100)]
    assert all(len({i // 100 for i in block}) == 1 for block in blocks)
    assert [block[0] // 100 for block in blocks] != list(range(10))
    ranged = ShardedSampler(1050, seed=1, block_size=100)
    assert sorted(ranged) == list(range(1050))


@pytest.mark.parametrize("kwargs,error", [
    ({"rank": 2, "world_size": 2}, ValueError), ({"world_size": 0}, ValueError), ({"block_size": 0}, ValueError),
    ({"seed": 1.5}, TypeError), ({"rank": True}, TypeError), ({"shuffle": 1}, TypeError),
])
def test_bad_arguments_are_named(kwargs, error):
    with pytest.raises(error):
        ShardedSampler(10, **kwargs)
    with pytest.raises(TypeError, match="object"):
        ShardedSampler(object())


@pytest.fixture
def dataset(tmp_path):
    path = str(tmp_path / "cache")
    write_shards((example(i) for i in range(60)), path, FEATURES, shard_size_bytes=8_000)
    return ShardedDataset(path, columns=["id"])


@pytest.mark.timeout(120)
def test_data_loader_order_does_not_depend_on_workers(dataset):
    def ids(workers: int) -> list[int]:
        sampler = ShardedSampler(dataset, seed=11)
        loader = DataLoader(dataset, sampler=sampler, batch_size=8, num_workers=workers,
                            collate_fn=lambda rows: [row["id"] for row in rows])
        return [i for batch in loader for i in batch]

    with_none = ids(0)
    assert with_none == ids(2)
    assert with_none == [dataset[i]["id"] for i in ShardedSampler(dataset, seed=11)]
    assert sorted(with_none) == sorted(row["id"] for row in dataset)


@pytest.mark.timeout(120)
def test_grain_map_dataset_checkpoints_and_restores(dataset):
    pipeline = grain.MapDataset.source(dataset).shuffle(seed=4).batch(5).to_iter_dataset()
    whole = [batch["id"].tolist() for batch in pipeline]
    it = iter(pipeline)
    head = [next(it)["id"].tolist() for _ in range(3)]
    state = it.get_state()
    restored = iter(pipeline)
    restored.set_state(state)
    assert head + [batch["id"].tolist() for batch in restored] == whole


def test_grain_sees_the_batched_protocol(dataset):
    from grain._src.python.dataset import base

    assert isinstance(dataset, base.SupportsBatchedReadRandomAccessDataSource)
    assert dataset._getitems([3, 1]) == [dataset[3], dataset[1]]


def test_grain_checkpoint_refuses_a_changed_view(dataset):
    sampler = grain.samplers.IndexSampler(num_records=len(dataset), shuffle=False, seed=0, num_epochs=1)
    loader = grain.DataLoader(data_source=dataset, sampler=sampler, worker_count=0)
    it = iter(loader)
    next(it)
    state = it.get_state()
    other = grain.DataLoader(data_source=dataset[::-1], sampler=sampler, worker_count=0)
    with pytest.raises(ValueError, match="data source"):
        iter(other).set_state(state)
    assert "version=1" in repr(dataset) and "rows[0:60:1]" in repr(dataset) and "rows[59:-1:-1]" in repr(dataset[::-1])
    assert repr(dataset[[1, 2]]) != repr(dataset[[2, 1]])


def test_docstring_examples_run():
    import doctest

    from beam_shards.read import backend, sampler

    for module in (sampler, backend):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_an_abandoned_iteration_closed_later_does_not_move_the_sampler():
    sampler = ShardedSampler(100, seed=1)
    old = iter(sampler)
    taken = [next(old) for _ in range(10)]
    assert sampler.state_dict()["position"] == 10 and len(set(taken)) == 10
    sampler.set_epoch(5)
    fresh = iter(sampler)
    first = next(fresh)
    old.close()  # as the garbage collector would, whenever it runs
    assert (sampler.epoch, sampler.state_dict()["position"]) == (5, 1)
    expected = ShardedSampler(100, seed=1)
    expected.set_epoch(5)
    assert [first, *fresh] == list(expected)
