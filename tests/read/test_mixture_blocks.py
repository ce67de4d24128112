"""Reads in order take a mixture's plan from a block of consecutive indices, planned at once: they read
the rows reads at random read, across blocks and epochs, and a copy for a worker leaves the block behind."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from beam_shards import Features, Mixture, Value, write_shards
from beam_shards.read import mixture as mixture_module

FEATURES = Features({"x": Value("int64")})
BITS = 4  # blocks of 16 indices, so a short read crosses blocks and epochs


@pytest.fixture(scope="module")
def caches(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("blocks")
    paths = []
    for number, size in enumerate([10, 25, 7]):
        paths.append(str(root / f"c{number}"))
        write_shards(({"x": 100 * number + i} for i in range(size)), paths[-1], FEATURES)
    return paths


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(mixture_module, "_BLOCK_BITS", BITS)
    monkeypatch.setattr(mixture_module, "_BLOCK_MASK", (1 << BITS) - 1)


# every source repeated with periodic slots (the continued plan); a subsampled source; a long period
MIXTURES = [([0.6, 0.4], 10**8, 0, 3 * 10**8 - 20), ([0.5, 0.3, 0.2], 37, 3, 30), ([0.5, 0.3, 0.2], 10001, 11, 9990)]


@pytest.mark.parametrize("weights, epoch_size, seed, start", MIXTURES)
def test_reads_in_order_read_what_reads_at_random_read(caches, small_blocks, weights, epoch_size, seed, start):
    sources = dict(zip(caches, weights))
    in_order, at_random = (Mixture(sources, epoch_size=epoch_size, seed=seed) for _ in range(2))
    indices = list(range(start, start + 70))  # past a block's end and, for two of them, an epoch's
    singles = [in_order[i] for i in indices]
    assert in_order._block[0] == (indices[-1] >> BITS), "the reads in order never planned a block"
    expected = []
    for i in indices:  # each read in a block other than the last one's: no block is ever planned
        at_random._touched = -1
        expected.append(at_random[i])
    assert at_random._block[0] == -1
    assert singles == expected
    batches = [row for s in range(0, 70, 8) for row in in_order.__getitems__(indices[s:s + 8])]
    assert batches == expected
    assert in_order.__getitems__(indices[::-1]) == expected[::-1]  # across blocks: planned as given


def test_a_batch_in_the_planned_block_reads_from_it(caches, small_blocks):
    mixture = Mixture(dict(zip(caches, [0.5, 0.3, 0.2])), epoch_size=37, seed=3)
    mixture.__getitems__([16, 17])
    mixture.__getitems__([18, 19])
    assert mixture._block[0] == 1
    planned = mixture._block[3][:]
    mixture._block[3][:] = [0] * len(planned)  # single reads would now read source 0; batches use the arrays
    assert [row["source"] for row in mixture.__getitems__([20, 31])] == [caches[planned[4]], caches[planned[15]]]


def test_a_copy_for_a_worker_leaves_the_planned_block_behind(caches, small_blocks):
    mixture = Mixture(dict(zip(caches, [0.6, 0.4])), epoch_size=10**8, seed=0)
    rows = [mixture[i] for i in range(40)]
    assert mixture._block[0] == 2
    copy = pickle.loads(pickle.dumps(mixture))
    assert copy._block[0] == -1 and copy._touched == -1
    assert [copy[i] for i in range(40)] == rows
    assert np.array_equal(copy._block[1], mixture._block[1])
