"""Mixture: exact proportions per epoch, passes over each source, even spread, refusals and errors."""

from __future__ import annotations

import collections
import pickle

import numpy as np
import pytest

from beam_shards import (Features, Mixture, SchemaMismatchError, ShardedDataset, ShardedSampler, Value,
                         write_shards)
from beam_shards.read.mixture_plan import apportion, slot, slots
from beam_shards.read.mixture_streams import SourceStreams
from beam_shards.read.row_identity import mixture_name, same_rows

FEATURES = Features({"x": Value("int64")})
SIZES = {"a": 10, "b": 25, "c": 7}


def write(path: str, start: int, count: int, features: Features = FEATURES, column: str = "x") -> str:
    write_shards(({column: start + i} for i in range(count)), path, features)
    return path


@pytest.fixture(scope="module")
def caches(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("mixture")
    return {name: write(str(root / name), 100 * number, size) for number, (name, size) in enumerate(SIZES.items())}


@pytest.fixture(scope="module")
def mixture(caches) -> Mixture:
    return Mixture({caches["a"]: 0.5, caches["b"]: 0.3, caches["c"]: 0.2}, epoch_size=37, seed=3)


def epoch(mixture: Mixture, number: int) -> list[dict]:
    return mixture.__getitems__(np.arange(number * len(mixture), (number + 1) * len(mixture)))


def test_every_epoch_holds_each_sources_share_exactly(mixture, caches):
    # shares 18.5, 11.1, 7.4: floors 36, one more to the largest remainder
    expected = {caches["a"]: 19, caches["b"]: 11, caches["c"]: 7}
    assert mixture.rows_per_epoch == expected and len(mixture) == 37
    for number in range(4):
        assert collections.Counter(row["source"] for row in epoch(mixture, number)) == expected


def _stream(mixture: Mixture, path: str, epochs: int) -> list[int]:
    """The rows of source `path`, epoch after epoch: its stream of passes."""
    return [row["x"] for number in range(epochs) for row in epoch(mixture, number) if row["source"] == path]


def test_a_repeated_source_gives_each_row_once_per_pass(mixture, caches):
    stream = _stream(mixture, caches["a"], 3)  # 19 rows an epoch of 10
    passes = [stream[i:i + 10] for i in range(0, 50, 10)]
    assert all(sorted(rows) == list(range(10)) for rows in passes)
    assert len({tuple(rows) for rows in passes}) == len(passes), "every pass has an order of its own"


def test_a_subsampled_source_reads_other_rows_each_epoch(mixture, caches):
    per_epoch = [[row["x"] for row in epoch(mixture, number) if row["source"] == caches["b"]] for number in range(12)]
    assert all(len(rows) == len(set(rows)) == 11 for rows in per_epoch)  # 11 rows an epoch of 25
    for first in range(0, 12, 2):  # a pass holds two epochs: they read 22 rows, none twice
        assert not set(per_epoch[first]) & set(per_epoch[first + 1])
    assert set().union(*per_epoch) == set(range(100, 125)), "the epochs read every row in turn"


def test_no_epoch_reads_a_row_of_a_subsampled_source_twice(caches):
    mixture = Mixture({caches["c"]: 1, caches["a"]: 2}, epoch_size=12, seed=5)  # 4 rows of 7, 8 of 10
    for number in range(20):
        rows = epoch(mixture, number)
        for path, count in ((caches["c"], 4), (caches["a"], 8)):
            mine = [row["x"] for row in rows if row["source"] == path]
            assert len(mine) == len(set(mine)) == count, (number, path, mine)


def test_the_rows_depend_on_seed_and_epoch_only(mixture, caches):
    again = Mixture({caches["a"]: 0.5, caches["b"]: 0.3, caches["c"]: 0.2}, epoch_size=37, seed=3)
    other = Mixture({caches["a"]: 0.5, caches["b"]: 0.3, caches["c"]: 0.2}, epoch_size=37, seed=4)
    assert epoch(again, 2) == epoch(mixture, 2) != epoch(mixture, 1)
    assert epoch(other, 0) != epoch(mixture, 0)
    assert pickle.loads(pickle.dumps(mixture)).__getitems__([5, 80, 5]) == mixture.__getitems__([5, 80, 5])
    assert len(pickle.dumps(mixture)) < 8_000


@pytest.mark.parametrize("counts", [[19, 11, 7], [1, 99], [3, 3, 3, 1], [50, 1, 0, 2], [1]])
def test_each_sources_rows_are_spread_evenly(counts):
    counts = np.array(counts)
    sources, occurrences = slots(np.arange(counts.sum()), counts)
    for source, count in enumerate(counts.tolist()):
        where = np.flatnonzero(sources == source)
        assert occurrences[where].tolist() == list(range(count))
        if count > 1:
            assert np.diff(where).max() <= counts.sum() / count + len(counts)


def test_one_position_is_where_many_put_it():
    counts = [13, 29, 7, 1, 50]
    sources, occurrences = slots(np.arange(100), np.array(counts))
    assert [slot(p, counts) for p in range(100)] == list(zip(sources.tolist(), occurrences.tolist()))
    streams = SourceStreams([1, 17, 10**9 + 7], 2**63 - 1)
    for source, length in enumerate([1, 17, 10**9 + 7]):
        for stream in (np.array([0, 5, 16, 17, 2**61 + 5, 10**15]), np.arange(3 * length, 3 * length + 17)):
            assert streams.rows(stream, np.full(len(stream), source)).tolist() == [streams.row(int(p), source)
                                                                                   for p in stream]


def test_counts_sum_to_the_epoch_size():
    assert apportion([1, 1, 1], 10) == [4, 3, 3]
    assert apportion([0.1, 0.2, 0.7], 1) == [0, 0, 1]
    assert sum(apportion([0.1] * 10, 10**8 + 7)) == 10**8 + 7


def test_indexing_as_a_dataset(mixture, caches):
    first = epoch(mixture, 0)
    assert [mixture[i] for i in range(37)] == first and mixture[-1] == first[-1] and mixture[np.int64(3)] == first[3]
    assert mixture[37] == epoch(mixture, 1)[0]
    assert mixture[2:9:3] == first[2:9:3] and list(mixture) == first and mixture[[4, 4]] == [first[4]] * 2
    assert mixture._getitems([1, 2]) == first[1:3] and mixture.__getitems__([]) == []
    with pytest.raises(IndexError, match="-38 out of range for a mixture of 37 rows"):
        mixture[-38]
    with pytest.raises(TypeError, match="bool"):
        mixture[True]
    assert repr(mixture).startswith("Mixture({ShardedDataset(path=") and "seed=3" in repr(mixture)
    assert mixture.features == Features({"x": Value("int64"), "source": Value("string")})


def test_datasets_keep_their_version_and_view_and_the_epoch_size_defaults_to_their_rows(caches):
    mixture = Mixture({ShardedDataset(caches["a"])[:4]: 1, caches["b"]: 1})
    assert len(mixture) == 4 + 25 and mixture.rows_per_epoch == {caches["a"]: 15, caches["b"]: 14}
    rows = [row["x"] for row in mixture if row["source"] == caches["a"]]
    assert set(rows) == {0, 1, 2, 3}


def test_a_sampler_yields_each_epochs_own_indices(mixture):
    sampler = ShardedSampler(mixture, shuffle=False)
    assert list(sampler) == list(range(37)) and list(sampler) == list(range(37, 74))
    shuffled = ShardedSampler(mixture, seed=1, world_size=2, rank=1)
    shuffled.set_epoch(2)
    assert all(74 <= i < 111 for i in shuffled)


# refusals ----------------------------------------------------------------------------

def _state(mixture: Mixture) -> dict:
    sampler = ShardedSampler(mixture, seed=0)
    iterator = iter(sampler)
    next(iterator)
    return sampler.state_dict()


def test_a_state_of_the_same_mixture_resumes_and_scaled_weights_are_the_same_mixture(caches):
    state = _state(Mixture({caches["a"]: 2, caches["b"]: 1}, epoch_size=30, seed=1))
    resumed = ShardedSampler(Mixture({caches["a"]: 4.0, caches["b"]: 2.0}, epoch_size=30, seed=1), seed=0)
    resumed.load_state_dict(state)
    assert len(list(resumed)) == 29


@pytest.mark.parametrize("change, match", [
    ({"weights": (3, 1)}, r"weight 2\.0 -> 3\.0 \(20 -> 23 rows per epoch\)"),
    ({"seed": 2}, "mixture changed: seed 1 -> 2"),
    ({"epoch_size": 31}, "epoch_size 30 -> 31"),
    ({"columns": []}, r"columns \['x'\] -> \[\]"),
    ({"swap": True}, "sources"),
])
def test_a_state_of_a_changed_mixture_names_what_changed(caches, change, match):
    state = _state(Mixture({caches["a"]: 2, caches["b"]: 1}, epoch_size=30, seed=1))
    weights = change.get("weights", (2, 1))
    sources = {caches["a"]: weights[0], caches["b"]: weights[1]}
    if change.get("swap"):
        sources = dict(reversed(sources.items()))
    changed = Mixture(sources, epoch_size=change.get("epoch_size", 30), seed=change.get("seed", 1),
                      columns=change.get("columns"))
    with pytest.raises(ValueError, match=f"another order: .*dataset.*{match}"):
        ShardedSampler(changed, seed=0).load_state_dict(state)


def test_a_state_of_a_changed_source_names_the_source_and_its_version(tmp_path):
    a, b = write(str(tmp_path / "a"), 0, 10), write(str(tmp_path / "b"), 100, 10)
    state = _state(Mixture({a: 1, b: 1}))
    write(b, 200, 10)  # version 2 of b
    with pytest.raises(ValueError, match=f"source '{b}' rows .*version 1.* -> .*version 2.*version=1"):
        ShardedSampler(Mixture({a: 1, b: 1}), seed=0).load_state_dict(state)
    ShardedSampler(Mixture({a: 1, ShardedDataset(b, version=1): 1}), seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="not of a mixture"):
        ShardedSampler(ShardedDataset(a), seed=0).load_state_dict(_state(Mixture({a: 1})) | {"num_samples": 10})


def test_mixtures_of_compacted_versions_are_the_same_rows():
    def named(version: int, count: int = 5) -> str:
        return mixture_name(0, 10, ["x"], "source", [("a", 1.0, count, f"w1 version {version}, rows[0:5:1], 5 rows")])

    assert same_rows(named(1), named(2)) and not same_rows(named(1), named(1, count=6))
    assert not same_rows("mixture {", named(1)) and not same_rows(named(1), "w1 version 1, rows[0:5:1], 5 rows")


# errors ------------------------------------------------------------------------------

def test_sources_of_other_features_are_refused_naming_the_column(caches, tmp_path):
    other = write(str(tmp_path / "int32"), 0, 5, Features({"x": Value("int32")}))
    with pytest.raises(SchemaMismatchError, match=r"column 'x' is Value\('int64'\) in source .* but Value\('int32'\)"):
        Mixture({caches["a"]: 1, other: 1})
    renamed = write(str(tmp_path / "y"), 0, 5, Features({"y": Value("int64")}), column="y")
    with pytest.raises(KeyError, match=r"lacks the column\(s\) \['x'\]"):
        Mixture({caches["a"]: 1, renamed: 1})


@pytest.mark.parametrize("sources, options, error, match", [
    ({}, {}, ValueError, "at least one source"),
    ({"a": 0}, {}, ValueError, "weight of source .* positive finite number; got 0"),
    ({"a": -1.5}, {}, ValueError, "got -1.5"),
    ({"a": float("nan")}, {}, ValueError, "got nan"),
    ({"a": float("inf")}, {}, ValueError, "got inf"),
    ({"a": True}, {}, ValueError, "got True"),
    ({"a": 1}, {"epoch_size": 0}, ValueError, "epoch_size must be in 1.*got 0"),
    ({"a": 1}, {"epoch_size": 2.5}, TypeError, "epoch_size must be an int; got 2.5"),
    ({"a": 1}, {"seed": -1}, ValueError, "seed must be in 0.*got -1"),
    ({"a": 1, "b": 1, "a again": 1}, {}, ValueError, "read one cache"),
    ({"a": 1}, {"source_column": "x"}, ValueError, "source column 'x' is one of the columns"),
    ({3: 1}, {}, TypeError, "path or a ShardedDataset; got int"),
])
def test_bad_mixtures_are_refused_with_the_values(caches, sources, options, error, match):
    paths = dict(caches, **{"a again": ShardedDataset(caches["a"])})
    sources = {paths.get(source, source): weight for source, weight in sources.items()}
    with pytest.raises(error, match=match):
        Mixture(sources, **options)


def test_columns_pick_what_every_source_reads(caches, tmp_path):
    path = str(tmp_path / "two")
    write_shards(({"x": i, "y": f"y{i}"} for i in range(4)), path, Features({"x": Value("int64"), "y": Value("string")}))
    dataset = ShardedDataset(path)
    assert dataset.select_columns(["y"])[1] == {"y": "y1"} and dataset.columns == ["x", "y"]
    with pytest.raises(KeyError, match=r"unknown column\(s\) \['z'\]"):
        dataset.select_columns(["z"])
    mixture = Mixture({dataset: 1, caches["a"]: 1}, columns=["x"])
    assert {tuple(row) for row in mixture} == {("x", "source")}
    assert repr(mixture) != repr(Mixture({dataset: 1, caches["a"]: 2}, columns=["x"]))  # Grain's checkpoint check


def test_a_source_column_of_another_name(caches):
    mixture = Mixture({caches["a"]: 1}, source_column="origin")
    assert mixture[0]["origin"] == caches["a"] and "source" not in mixture[0]


def test_grain_reads_the_mixture_as_a_batched_source(mixture):
    grain = pytest.importorskip("grain")
    from grain._src.python.dataset import base

    assert isinstance(mixture, base.SupportsBatchedReadRandomAccessDataSource)
    batches = list(grain.MapDataset.source(mixture).batch(10))
    assert [x for batch in batches for x in batch["x"].tolist()] == [row["x"] for row in epoch(mixture, 0)]
    later = grain.MapDataset.range(37, 74).map(mixture.__getitem__)  # as the guide says to read epoch 1
    assert list(later) == epoch(mixture, 1)
