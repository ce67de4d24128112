"""A mixture's source whose epoch reads a few passes keeps a table of each pass read one position at a time:
built after enough reads of the pass (not after a few), it gives the rows computing them gives, and a copy
drops it."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from beam_shards import Features, Mixture, Value, write_shards
from beam_shards.read.mixture_streams import SourceStreams
from beam_shards.read.mixture_tables import PassTables, passes_per_epoch, tabled

LENGTHS = [1, 2, 7, 97, 1000, 3001]
KEPT = [1, 2, 3, 2, 2, 4]


class CountingStreams(SourceStreams):
    """`SourceStreams` that counts the whole passes it computes (a table being built)."""

    def __init__(self, lengths, seed):
        super().__init__(lengths, seed)
        self.whole_passes = 0

    def rows(self, stream, sources):
        if len(stream) > 1 and len(stream) == self._lengths[int(sources[0])] and stream[0] % len(stream) == 0 \
                and (stream[1:] - stream[:-1] == 1).all():
            self.whole_passes += 1
        return super().rows(stream, sources)


def _reads(lengths, rng, passes, count):
    sources = rng.integers(0, len(lengths), count)
    positions = rng.integers(0, passes, count) * np.array(lengths)[sources] + rng.integers(0, 10**9, count) \
        % np.array(lengths)[sources]
    return positions, sources


def test_reads_with_tables_give_the_rows_computed_alone_give():
    plain, tables = SourceStreams(LENGTHS, seed=5), PassTables(SourceStreams(LENGTHS, seed=5), LENGTHS, KEPT)
    rng = np.random.default_rng(0)
    positions, sources = _reads(LENGTHS, rng, 6, 20_000)  # six passes each: some tabled, some dropped again
    for position, source in zip(positions.tolist(), sources.tolist()):
        assert tables.row(position, source) == plain.row(position, source), (position, source)
    assert all(tables._tables), "no source got a table"
    assert tables.rows(positions, sources).tolist() == plain.rows(positions, sources).tolist()


def test_a_pass_gets_a_table_after_a_twentieth_of_its_rows_read_and_not_before():
    streams = CountingStreams([3000], seed=1)
    tables = PassTables(streams, [3000], [2])
    rng = np.random.default_rng(1)
    for within in rng.integers(0, 3000, 149).tolist():
        tables.row(3000 * 4 + within, 0)
    assert streams.whole_passes == 0 and not tables._tables[0]
    tables.row(3000 * 4 + 5, 0)
    assert streams.whole_passes == 1 and list(tables._tables[0]) == [4]
    for within in rng.integers(0, 3000, 1000).tolist():  # read from the table
        tables.row(3000 * 4 + within, 0)
    assert streams.whole_passes == 1
    for number in (5, 6):  # two more passes tabled: the oldest is dropped
        for within in range(150):
            tables.row(3000 * number + within, 0)
    assert streams.whole_passes == 3 and list(tables._tables[0]) == [5, 6]


def test_sources_read_many_passes_an_epoch_or_too_long_get_no_tables():
    streams = SourceStreams([10, 10], seed=0)
    assert tabled(streams, [10, 10], [1000, 1000]) is streams  # 101 passes an epoch each
    assert passes_per_epoch(10, 10) == 1 and passes_per_epoch(3, 10) == 1 and passes_per_epoch(11, 10) == 2 \
        and passes_per_epoch(21, 10) == 3
    some = tabled(streams, [10, 10], [15, 1000])
    assert isinstance(some, PassTables) and some._kept == [3, 0]
    for position in range(400):
        some.row(position, 1)
    assert not some._tables[1]


def test_a_copy_starts_without_tables():
    tables = PassTables(SourceStreams([40], seed=2), [40], [1])
    for position in range(40):
        tables.row(position, 0)
    assert tables._tables[0] and tables._reads == [{}]
    tables.row(45, 0)
    copy = pickle.loads(pickle.dumps(tables))
    assert copy._tables == [{}] and copy._reads == [{}] and tables._tables[0] and tables._reads[0]
    assert [copy.row(p, 0) for p in range(80)] == [tables.row(p, 0) for p in range(80)]


@pytest.mark.parametrize("epoch_size", [None, 23, 400])
def test_a_mixture_read_at_random_with_tables_reads_its_rows(tmp_path, epoch_size):
    paths = []
    for number, size in enumerate([30, 97, 1]):
        paths.append(str(tmp_path / f"c{number}"))
        write_shards(({"x": 1000 * number + i} for i in range(size)), paths[-1], Features({"x": Value("int64")}))
    mixture = Mixture(dict(zip(paths, [0.5, 0.3, 0.2])), epoch_size=epoch_size, seed=9)
    plain = Mixture(dict(zip(paths, [0.5, 0.3, 0.2])), epoch_size=epoch_size, seed=9)
    plain._streams = SourceStreams(plain._lengths, 9)
    assert isinstance(mixture._streams, PassTables)
    rng = np.random.default_rng(3)
    indices = rng.integers(0, 3 * len(mixture), 600).tolist()
    assert [mixture[i] for i in indices] == [plain[i] for i in indices]
    assert any(mixture._streams._tables)
    assert mixture.__getitems__(indices) == plain.__getitems__(indices)
    copy = pickle.loads(pickle.dumps(mixture))
    assert not any(copy._streams._tables) and [copy[i] for i in indices[:50]] == [plain[i] for i in indices[:50]]
