"""Shard tables as a hostile writer could make them (issue 35), the header consistent with each, so that
only the table's entries are wrong: a shard listed twice (size and CRC-32 consistent, as the review made
it) is refused by every reader, naming the shard, instead of serving its rows twice; and Hypothesis
tables of repeated, dropped, moved and random entries give every reader a clear error or rows of the
cache, never a row twice, a crash or a hang.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import pickle
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from hypothesis import HealthCheck, given, settings, strategies as st

from beam_shards import (ArrowBackend, CacheNotFoundError, CorruptCacheError, Features, ReadAllFromArrowShards,
                         ReadFromArrowShards, ShardedDataset, Value, read_metadata, shard_paths, verify, write_shards)
from beam_shards.format.shard_table import ShardTable, TableRef
from beam_shards.format.table_files import TABLE_SCHEMA, concat_tables, table_file

from _hostile import SCALE, printed_tally, rewrite_table

pytestmark = pytest.mark.timeout(60)

FEATURES = Features({"id": Value("int64"), "text": Value("string")})
ROWS = 10


def rows() -> list[dict]:
    return [{"id": i, "text": f"row {i}"} for i in range(ROWS)]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> str:
    """A cache of 10 rows in 4 shards (3, 3, 3 and 1 rows)."""
    path = str(tmp_path_factory.mktemp("tables") / "cache")
    write_shards(rows(), path, FEATURES, max_rows_per_shard=3)
    return path


@pytest.fixture
def cache(source, tmp_path) -> str:
    path = str(tmp_path / "cache")
    shutil.copytree(source, path)
    return path


def entries(*picks: int) -> Callable[[pa.Table], pa.Table]:
    """A change listing the table's entries `picks`, in that order (row starts renumbered)."""
    return lambda table: concat_tables([table.slice(i, 1) for i in picks])


# (name, entries listed, the shard listed twice); shards 0 to 3 hold 3, 3, 3 and 1 rows.
LISTED_TWICE = [
    ("the last shard again at the end", (0, 1, 2, 3, 3), 3),
    ("the first shard in place of the second", (0, 0, 2, 3), 0),
    ("the first shard at the end", (0, 1, 2, 3, 0), 0),
    ("every shard twice", (0, 1, 2, 3, 0, 1, 2, 3), 0),
]
READERS: dict[str, Callable[[str], object]] = {
    "ArrowBackend.open + slice": lambda path: ArrowBackend.open(path).slice(0, 10**6),
    "ArrowBackend.open + take": lambda path: (lambda b: b.take(np.arange(b.num_rows)[::-1]))(ArrowBackend.open(path)),
    "ArrowBackend.open + iter_batches": lambda path: list(ArrowBackend.open(path).iter_batches()),
    "ShardedDataset": lambda path: list(ShardedDataset(path)),
    "ShardedDataset slice": lambda path: list(ShardedDataset(path)[2:]),
    "ShardedDataset pickled": lambda path: list(pickle.loads(pickle.dumps(ShardedDataset(path)))),
    "shard_paths": shard_paths,
    "to_hf": lambda path: pytest.importorskip("datasets") and ShardedDataset(path).to_hf(),
    "ReadFromArrowShards": lambda path: beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"]))
    | ReadFromArrowShards(path),
}


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("picks, twice", [pytest.param(p, t, id=n) for n, p, t in LISTED_TWICE])
def test_a_shard_listed_twice_is_refused_by_every_reader(cache, reader, picks, twice):
    path = cache
    name = read_metadata(path).shards[twice].file
    rewrite_table(path, entries(*picks))
    assert read_metadata(path).num_rows == sum((3, 3, 3, 1)[i] for i in picks)  # the header agrees
    with pytest.raises(CorruptCacheError) as raised:
        READERS[reader](path)
    message = str(raised.value)
    assert f"lists shard {name} twice" in message and "\n" not in message, message


@pytest.mark.timeout(120)
def test_read_all_from_arrow_shards_refuses_a_shard_listed_twice(cache):
    name = read_metadata(cache).shards[0].file
    rewrite_table(cache, entries(0, 1, 0))
    p = beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"]))
    _ = p | beam.Create([cache]) | ReadAllFromArrowShards()
    with pytest.raises(Exception, match=f"lists shard {name} twice"):
        p.run().wait_until_finish()


def test_verify_names_a_shard_listed_twice(cache):
    name = read_metadata(cache).shards[1].file
    rewrite_table(cache, entries(0, 1, 2, 1))
    report = verify(cache)
    assert not report.ok and any(f"lists shard {name} twice" in problem for problem in report.problems)


def test_whichever_copy_is_touched_first_the_other_is_refused(cache):
    """The check follows touches: an open reads no table, the first copy touched serves its rows, the
    second is refused; no row is served twice."""
    rewrite_table(cache, entries(0, 1, 2, 3, 1))  # rows 3-5 again as rows 10-12
    for first, second in ((4, 11), (11, 4)):
        dataset = ShardedDataset(cache)
        assert dataset[first]["id"] == 4
        with pytest.raises(CorruptCacheError, match="as shards 1 and 4 of 5"):
            dataset[second]
        assert dataset[first]["id"] == 4 and dataset[0]["id"] == 0  # the rest still reads


def test_check_distinct_looks_at_every_table(cache):
    """Across tables too: the check of a whole version, as a pipeline's source makes it."""
    table = read_metadata(cache).shards.arrow()
    name = table.column("file")[0].as_py()
    shards = ShardTable(*split_tables(table, [0, 1], [2, 3, 0]))
    with pytest.raises(CorruptCacheError, match=f"lists shard {name} twice, as shards 0 and 4 of 5"):
        shards.check_distinct()
    ShardTable(*split_tables(table, [0, 1], [2, 3])).check_distinct()
    ShardTable.of([]).check_distinct()


def split_tables(table: pa.Table, *parts: list[int]) -> tuple:
    """ShardTable arguments listing `table`'s entries as one table per part, loaded from memory."""
    tables = [concat_tables([table.slice(i, 1) for i in part]) for part in parts]
    refs = [TableRef(table_file(t, "20260101T000000Z-0000000a")[0], t.num_rows,
                     int(np.sum(t.column("num_rows").to_numpy())), int(np.sum(t.column("num_bytes").to_numpy())), 0,
                     "crc32:00000000") for t in tables]
    return refs, "the test's tables", None, tables


# ---- fuzzing shard tables ----------------------------------------------------------------------

ENTRY_VALUES = {
    "file": st.sampled_from(["shard-20260101T000000Z-0000000a-00000-of-00001.arrow", "", "../x.arrow", "\0",
                             "shard-x.arrow"]) | st.text(max_size=60),
    "num_rows": st.integers(-2, 2**63 - 1) | st.sampled_from([0, 1, 3, 10]),
    "num_bytes": st.integers(-2, 2**63 - 1),
    "checksum": st.sampled_from(["crc32:00000000", "crc32:", "md5:0"]) | st.text(max_size=16),
    "row_start": st.integers(-2**63, 2**63 - 1) | st.sampled_from([0, 1, 3, 9, 10]),
    "batch_rows": st.none() | st.lists(st.none() | st.integers(-3, 12), max_size=4),
}


SHARDS = 4
ENTRY_EDITS = st.one_of(
    *(st.tuples(st.integers(0, 7), st.just(field), values) for field, values in ENTRY_VALUES.items()),
    st.tuples(st.integers(0, 7), st.just("file of"), st.integers(0, 7)))  # another entry's file, its size aside


@dataclasses.dataclass(frozen=True)
class TableChange:
    """A change of the cache's shard table: entries `picks` (repeated, dropped or moved), then the
    values of `edits` (position, field, value) replaced, a "file of" edit naming another entry's file."""

    picks: tuple[int, ...]
    edits: tuple[tuple[int, str, object], ...]

    def __call__(self, table: pa.Table) -> pa.Table:
        changed = concat_tables([table.slice(i, 1) for i in self.picks])
        values = changed.to_pylist()
        for at, field, value in self.edits if values else ():
            if field == "file of":
                field, value = "file", values[value % len(values)]["file"]
            values[at % len(values)][field] = value
        return pa.Table.from_pylist(values, schema=TABLE_SCHEMA) if self.edits and values else changed


CHANGES = st.builds(TableChange, st.permutations(range(SHARDS)).map(tuple)
                    | st.lists(st.integers(0, SHARDS - 1), max_size=8).map(tuple),
                    st.lists(ENTRY_EDITS, max_size=2).map(tuple))


def fuzz_readers(path: str) -> dict[str, Callable[[], list | None]]:
    """Every reader the fuzz runs, by name; row readers return the ids they read."""
    return {
        "ArrowBackend": lambda: ArrowBackend.open(path).slice(0, 10**6).column("id").to_pylist(),
        "ShardedDataset": lambda: [row["id"] for row in ShardedDataset(path)],
        "ArrowBackend take": lambda: (lambda b: b.take(np.arange(min(b.num_rows, 10**6))[::-1]).column("id")
                                      .to_pylist())(ArrowBackend.open(path)),
        "shard_paths": lambda: ignored(shard_paths(path)),
        "verify": lambda: ignored(verify(path)),
    }


def ignored(value: object) -> None:
    """What a reader that returns no rows gives back."""
    return None


@pytest.fixture(scope="module")
def table_tally(request) -> Iterator[collections.Counter]:
    yield from printed_tally(request, lambda outcomes: (
        f"FUZZ shard tables: {outcomes['cases']} cases, {outcomes['clear error']} clear errors, "
        f"{outcomes['rows read']} rows read, {outcomes['crash']} crashes, {outcomes['hang']} hangs "
        f"(slowest {outcomes['slowest ms']} ms)"))


HANG_SECONDS = 20


@pytest.mark.timeout(600 + 60 * SCALE)
@settings(max_examples=60 * SCALE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(change=CHANGES)
def test_fuzzed_shard_tables_give_a_clear_error_or_rows_of_the_cache_never_twice(source, table_tally, tmp_path,
                                                                                  change):
    path = os.path.join(tempfile.mkdtemp(dir=tmp_path), "cache")
    shutil.copytree(source, path)
    try:
        rewrite_table(path, change)
    except (pa.ArrowException, OverflowError, ValueError):
        return  # not a table Arrow can hold, so no writer could have made it
    table_tally["cases"] += 1
    outcome, start = "rows read", time.monotonic()
    for name, read in fuzz_readers(path).items():
        try:
            ids = read()
        except (CorruptCacheError, CacheNotFoundError) as error:
            assert str(error) and "\n" not in str(error).strip(), f"{name}: {error!r}"
            outcome = "clear error"
            continue
        except BaseException:
            table_tally["crash"] += 1
            raise
        if ids is not None:
            assert set(ids) <= set(range(ROWS)) and len(ids) == len(set(ids)), f"{name} read {ids}"
    elapsed = time.monotonic() - start
    table_tally["slowest ms"] = max(table_tally["slowest ms"], round(1000 * elapsed))
    table_tally["hang"] += elapsed > HANG_SECONDS
    assert elapsed <= HANG_SECONDS, f"the readers took {elapsed:.0f} s"
    table_tally[outcome] += 1
    shutil.rmtree(path)
