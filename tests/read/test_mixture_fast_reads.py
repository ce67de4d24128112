"""A mixture's reads, past their fast paths: the rows a (seed, epoch) gives stay the ones it gave before the
paths were added, batches and single reads agree, and a source of rows that are not dicts is refused."""

from __future__ import annotations

import numpy as np
import pytest

from beam_shards import Features, Mixture, ShardedDataset, Value, write_shards

FEATURES = Features({"x": Value("int64")})


@pytest.fixture(scope="module")
def caches(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("fast_reads")
    paths = {}
    for number, (name, size) in enumerate({"a": 10, "b": 25, "c": 7}.items()):
        paths[name] = str(root / name)
        write_shards(({"x": 100 * number + i} for i in range(size)), paths[name], FEATURES)
    return paths


@pytest.mark.parametrize("weights, epoch_size, seed, indices, expected", [
    # slots kept as a table of one period (the whole epoch), a subsampled source, epochs up to 2^61
    ([0.5, 0.3, 0.2], 37, 3, [0, 1, 5, 36, 37, 1000, 37 * 10**6 + 5, 2**61 + 3], [7, 118, 104, 8, 1, 109, 114, 202]),
    # a period of 5 positions and every source repeated: an index is its source's stream position
    ([0.6, 0.4], 10**8, 0, [0, 1, 7, 10**8 - 1, 3 * 10**8 + 12345, 2**61 + 3], [5, 117, 9, 1, 2, 5]),
    # a period past the table's (counts 5001, 3000, 2000 share no factor): searched
    ([0.5, 0.3, 0.2], 10001, 11, [0, 1, 4097, 10000, 10001, 123456789, 2**61 + 3], [7, 116, 202, 9, 1, 112, 5]),
])
def test_a_seed_and_epoch_give_the_rows_they_gave(caches, weights, epoch_size, seed, indices, expected):
    mixture = Mixture(dict(zip(caches.values(), weights)), epoch_size=epoch_size, seed=seed)
    assert [mixture[i]["x"] for i in indices] == expected
    assert [row["x"] for row in mixture.__getitems__(indices)] == expected
    assert [row["x"] for row in mixture.__getitems__(np.array(indices[::-1]))] == expected[::-1]


def test_batches_and_single_reads_agree_with_one_source_or_many(caches):
    rng = np.random.default_rng(0)
    for sources in ({caches["a"]: 1}, {caches["a"]: 2, caches["b"]: 1, caches["c"]: 1}):
        mixture = Mixture(sources, epoch_size=10**6, seed=7)
        indices = rng.integers(0, 50 * 10**6, 300).tolist()
        assert mixture.__getitems__(indices) == [mixture[i] for i in indices]
        assert mixture.__getitems__([]) == []


@pytest.mark.parametrize("read", [lambda mixture: mixture[3], lambda mixture: mixture.__getitems__([0, 1, 2, 3])])
def test_a_source_of_rows_not_dicts_is_refused_naming_it(caches, read):
    tuples = ShardedDataset(caches["b"], transform=lambda row: (row["x"],))
    mixture = Mixture({caches["a"]: 1, tuples: 1}, epoch_size=4)
    with pytest.raises(TypeError, match=f"source '{caches['b']}' gives rows of type tuple"):
        read(mixture)
