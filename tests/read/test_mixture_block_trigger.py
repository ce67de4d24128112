"""ds[i] plans a mixture's block of consecutive indices only for reads in order (steps forward of one
stride, as a sampler's rank reads): reads at random in an epoch of a few blocks, though often in the
block of the read before, plan none (each plan costs a block's worth of arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest

from beam_shards import Features, Mixture, Value, write_shards
from beam_shards.read import mixture as mixture_module

BITS = 4  # blocks of 16 indices


@pytest.fixture(scope="module")
def caches(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("trigger")
    paths = []
    for number, size in enumerate([10, 25]):
        paths.append(str(root / f"c{number}"))
        write_shards(({"x": 100 * number + i} for i in range(size)), paths[-1], Features({"x": Value("int64")}))
    return paths


@pytest.fixture
def planned(monkeypatch) -> list[int]:
    """Blocks of 16 indices; the blocks planned are listed."""
    monkeypatch.setattr(mixture_module, "_BLOCK_BITS", BITS)
    monkeypatch.setattr(mixture_module, "_BLOCK_MASK", (1 << BITS) - 1)
    blocks: list[int] = []
    plan = mixture_module.Mixture._planned_block

    def counted(self, block):
        found = plan(self, block)
        if found is not None:
            blocks.append(block)
        return found

    monkeypatch.setattr(mixture_module.Mixture, "_planned_block", counted)
    return blocks


def test_reads_at_random_in_a_small_epoch_plan_no_block(caches, planned):
    mixture = Mixture(dict(zip(caches, [0.6, 0.4])), epoch_size=48, seed=1)
    indices = np.random.default_rng(0).integers(0, 48, 400)
    same_block = int((indices[1:] >> BITS == indices[:-1] >> BITS).sum())
    assert same_block > 100  # each of these planned a block before
    rows = [mixture[i] for i in indices.tolist()]
    assert len(planned) <= 2, planned
    plain = Mixture(dict(zip(caches, [0.6, 0.4])), epoch_size=48, seed=1)
    assert rows == plain.__getitems__(indices)


@pytest.mark.parametrize("stride", [1, 3])
def test_reads_in_order_of_one_stride_plan_each_block(caches, planned, stride):
    mixture = Mixture(dict(zip(caches, [0.6, 0.4])), epoch_size=10**6, seed=2)
    indices = list(range(5 * 10**6 + 1, 5 * 10**6 + 40 * 16, stride))  # a rank's of a sampler without shuffle
    rows = [mixture[i] for i in indices]
    assert planned == sorted({i >> BITS for i in indices})  # each at its second read, the first at its fourth
    assert rows == Mixture(dict(zip(caches, [0.6, 0.4])), epoch_size=10**6, seed=2).__getitems__(indices)
