"""Caches at scale (format 3): costs follow what a call touches, not the number of shards or versions.

The cache here has 10,000 shards: one real shard staged by a `ShardWriter`, hard-linked
under 10,000 staged names and published by `commit.publish` (each is a valid shard of
its own name), then versions added by real appends. Costs are counted (reads, tables
read, bytes written), never timed.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import zlib

import numpy as np
import pyarrow as pa
import pytest

from beam_shards import ArrowBackend, ShardedDataset, list_versions, read_metadata, verify, write_shards
from beam_shards.errors import CorruptCacheError
from beam_shards.features import ClassLabel, Features, Value
from beam_shards.format import version_files
from beam_shards.format.layout import TABLES_DIR, CacheLayout, new_write_id
from beam_shards.format.table_files import TABLE_SCHEMA, plan_tables, table_file
from beam_shards.shards.options import WriterOptions, WrittenShard
from beam_shards.shards.writer import ShardWriter
from beam_shards.storage import folders, fs
from beam_shards.versions import commit, gc
from beam_shards.versions.staging import staged_shards

from _reliability import leftovers

FEATURES = Features({"id": Value("int64"), "label": ClassLabel(num_classes=3),
                     "score": Value("float32", nullable=True)})
SHARDS = 10_000


def row(i: int) -> dict:
    return {"id": i, "label": i % 3, "score": None if i % 4 == 0 else i / 2}


def build(path: str, shards: int) -> None:
    """Publishes `shards` one-row shards (hard links of one real shard) as version 1."""
    write_id = new_write_id()
    attempt = CacheLayout(path).new_attempt(write_id)
    writer = ShardWriter(FEATURES, staged_shards(attempt), WriterOptions(max_rows_per_shard=1))
    writer.add(row(1), 1)
    (first,) = writer.close()
    staged = [first] + [WrittenShard(fs.join(attempt, CacheLayout.staged_name(i)), 1, first.num_bytes, first.checksum,
                                     first.batch_rows, first.statistics) for i in range(1, shards)]
    for shard in staged[1:]:
        os.link(first.path, shard.path)
    commit.publish(path, write_id=write_id, features=FEATURES, staged=staged, options=WriterOptions(), metadata={})


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("scale") / "cache")
    build(path, SHARDS)
    return path


def counted_reads(monkeypatch) -> list[str]:
    """Every metadata file read (headers, tables) from now on, by path."""
    reads = []
    real_read, real_table = fs.read_bytes, version_files.read_table

    def read_bytes(path, limit=None):
        reads.append(str(path))
        return real_read(path, limit)

    def read_table(path, ref):
        reads.append(f"{TABLES_DIR}/{ref.file}")
        return real_table(path, ref)

    monkeypatch.setattr(fs, "read_bytes", read_bytes)
    monkeypatch.setattr(version_files, "read_table", read_table)
    return reads


@pytest.mark.slow  # a cache of 10,000 shards
def test_open_and_first_row_read_the_header_a_look_for_the_next_version_and_one_table(big, monkeypatch):
    reads = counted_reads(monkeypatch)
    backend = ArrowBackend.open(big)
    assert len(backend) == SHARDS and backend.num_shards == SHARDS
    assert len(reads) == 2, reads  # `_metadata.json`, and `_versions/<latest + 1>.json` (absent)
    assert backend.get_row(SHARDS - 1) == row(1)
    assert len(reads) == 3 and reads[2].startswith(TABLES_DIR), reads


@pytest.mark.slow  # a cache of 10,000 shards
def test_a_pickled_reader_is_a_few_kb_at_any_size(big, tmp_path):
    small = str(tmp_path / "small")
    build(small, 10)
    sizes = {n: len(pickle.dumps(ShardedDataset(p))) for n, p in ((10, small), (SHARDS, big))}
    dataset = ShardedDataset(big)
    dataset[5]  # tables read in this process stay out of the pickle
    assert sizes[SHARDS] < 8_000 and abs(sizes[SHARDS] - sizes[10]) < 200, sizes
    assert len(pickle.dumps(dataset)) == sizes[SHARDS]
    assert pickle.loads(pickle.dumps(dataset))[SHARDS - 3]["id"] == 1


@pytest.mark.slow  # a cache of 10,000 shards
def test_random_rows_are_routed_through_the_shard_table(big):
    backend = ArrowBackend.open(big)
    rows = np.random.default_rng(0).integers(0, SHARDS, 300)
    assert backend.take(rows).column("id").to_pylist() == [1] * 300
    offsets = backend.shard_offsets
    assert len(offsets) == SHARDS + 1 and offsets[-1] == SHARDS and offsets[1234] == 1234


@pytest.mark.slow  # a cache of 10,000 shards
def test_appends_write_what_they_add_and_share_the_rest(tmp_path):
    path = str(tmp_path / "cache")
    build(path, SHARDS)
    base = read_metadata(path).shards.refs[0]
    tables = CacheLayout(path).tables_dir
    written = []
    for n in range(40):
        before = set(os.listdir(tables))
        manifest = write_shards([row(100 + n)], path, FEATURES, mode="append", retention=None)
        new = set(os.listdir(tables)) - before
        written.append(sum(os.path.getsize(os.path.join(tables, name)) for name in new))
        assert manifest.shards.refs[0] == base, "the 10,000-shard table is shared, never rewritten"
        assert len(manifest.shards.refs) <= 2 + int(np.log2(n + 1)), manifest.shards.refs
    assert max(written) < base.size / 10, written  # a one-shard append writes far less than the base table
    assert manifest.num_shards == SHARDS + 40 and manifest.statistics.num_rows == SHARDS + 40
    header = os.path.getsize(CacheLayout(path).version(manifest.version))
    assert header < 4_000, header
    backend = ArrowBackend.open(path)
    assert backend.slice(SHARDS - 1, 41).column("id").to_pylist() == [1] + list(range(100, 140))


def test_gc_reads_each_shared_table_once(tmp_path, monkeypatch):
    path = str(tmp_path / "cache")
    build(path, 1000)
    for n in range(12):
        write_shards([row(n)], path, FEATURES, mode="append", retention=None)
    distinct = {ref.file for m in list_versions(path) for ref in m.shards.refs}
    reads = []
    real = gc.read_table
    monkeypatch.setattr(gc, "read_table", lambda p, ref: reads.append(ref.file) or real(p, ref))
    garbage = gc.find_garbage(path, gc.Retention(keep=3, min_age=datetime.timedelta(0)))
    assert garbage.removed_versions == list(range(1, 11)) and sorted(reads) == sorted(distinct)
    gc.collect_garbage(path, gc.Retention(keep=3, min_age=datetime.timedelta(0)))
    assert verify(path).ok and read_metadata(path).num_rows == 1012


def test_retention_after_each_append_removes_only_what_no_kept_version_lists(tmp_path, monkeypatch):
    path = str(tmp_path / "cache")
    build(path, 200)
    walks = []
    real_walk = folders.walk
    monkeypatch.setattr(folders, "walk", lambda folder: walks.append(folder) or real_walk(folder))
    for n in range(20):  # tail tables merge and go; the base table and every shard stay listed
        write_shards([row(1000 + n)], path, FEATURES, mode="append", retention=gc.Retention(keep=3, min_age=0))
        assert [m.version for m in list_versions(path)] == list(range(1, n + 3))[-3:]
        assert not leftovers(path), leftovers(path)
    assert walks == [], "the retention a write runs finds files by name, never by listing the folder"
    assert ArrowBackend.open(path).slice(195, 25).column("id").to_pylist() == [1] * 5 + list(range(1000, 1020))
    assert verify(path).ok


def test_statistics_are_those_of_the_rows(tmp_path):
    path = str(tmp_path / "cache")
    first = write_shards([row(i) for i in range(50)], path, FEATURES, max_rows_per_shard=7)
    appended = write_shards([row(i) for i in range(50, 60)], path, FEATURES, mode="append")
    for manifest, rows in ((first, range(50)), (appended, range(60))):
        values = [row(i) for i in rows]
        stats = read_metadata(path, version=manifest.version).statistics
        scores = [v["score"] for v in values if v["score"] is not None]
        assert stats.num_rows == len(values)
        assert (stats.columns["id"].min, stats.columns["id"].max) == (0, len(values) - 1)
        assert stats.columns["score"].nulls == len(values) - len(scores)
        assert (stats.columns["score"].min, stats.columns["score"].max) == (min(scores), max(scores))
        assert stats.columns["label"].classes == tuple(sum(v["label"] == c for v in values) for c in range(3))
    with open(CacheLayout(path).manifest) as handle:
        assert json.load(handle)["statistics"]["columns"]["label"] == {"rows": 60, "nulls": 0, "classes": [20, 20, 20]}


def test_plan_tables_carries_like_a_binary_counter():
    assert plan_tables([100_000, 1]) == 1 and plan_tables([100_000, 1, 1]) == 2
    assert plan_tables([4, 2, 1, 1]) == 4 and plan_tables([8, 1]) == 1 and plan_tables([3]) == 1
    sizes = []
    for _ in range(1000):  # a thousand one-shard appends keep a handful of tables
        sizes.append(1)
        merged = plan_tables(sizes)
        sizes[len(sizes) - merged:] = [sum(sizes[len(sizes) - merged:])]
        assert len(sizes) <= 11
    assert sum(sizes) == 1000


def rewrite_table(path: str, manifest, table: pa.Table) -> None:
    """Replaces the version's only shard table with `table`, its header's entry made to match
    (size and checksum): a crafted cache, as a hostile writer would make it."""
    ref = manifest.shards.refs[0]
    _, data = table_file(table, manifest.write_id)
    with open(CacheLayout(path).table(ref.file), "wb") as handle:
        handle.write(data)
    edit_header(path, lambda header: header["tables"][0].update(size=len(data),
                                                               checksum=f"crc32:{zlib.crc32(data):08x}"))


def edit_header(path: str, change) -> None:
    """Applies `change` to version 1's header in `_metadata.json` and `_versions/`."""
    layout = CacheLayout(path)
    for where in (layout.manifest, layout.version(1)):
        with open(where) as handle:
            header = json.load(handle)
        change(header)
        with open(where, "w") as handle:
            json.dump(header, handle)


def flip_name_byte(path: str, manifest) -> None:
    """One byte of a shard name in the table file changed (`-00001-` to `-00002-`), the size kept."""
    where = CacheLayout(path).table(manifest.shards.refs[0].file)
    with open(where, "rb") as handle:
        data = handle.read()
    name = manifest.shards[1].file.encode()
    with open(where, "wb") as handle:
        handle.write(data.replace(name, name.replace(b"-00001-", b"-00002-")))


DAMAGES = {
    "missing": (lambda path, manifest: os.remove(CacheLayout(path).table(manifest.shards.refs[0].file)),
                ["_tables/", "is missing"]),
    "truncated": (lambda path, manifest: os.truncate(CacheLayout(path).table(manifest.shards.refs[0].file), 100),
                  ["_tables/", "truncated"]),
    "a name's byte flipped": (flip_name_byte, ["_tables/", "checksum"]),
    "a crafted bad name": (lambda path, manifest: rewrite_table(path, manifest, (lambda t: t.set_column(
        0, TABLE_SCHEMA.field("file"), pa.array(["../x.arrow"] + t.column("file").to_pylist()[1:])))(
        manifest.shards.arrow())), ["entry 0", "invalid file name"]),
    "crafted rows against the row starts": (lambda path, manifest: rewrite_table(path, manifest, manifest.shards.arrow(
        ).set_column(1, TABLE_SCHEMA.field("num_rows"), pa.array([2, 4, 3], pa.int64()))), ["entry 0", "invalid rows"]),
    "crafted null batch rows": (lambda path, manifest: rewrite_table(path, manifest, manifest.shards.arrow().set_column(
        5, TABLE_SCHEMA.field("batch_rows"), pa.array([[None, 3]] * 3, pa.list_(pa.int64())))),
        ["entry 0", "batch rows"]),
    "an empty table claiming rows": (lambda path, manifest: edit_header(path, lambda header: header["tables"].append(
        dict(header["tables"][0], num_shards=0, num_rows=5, num_bytes=0))), ["invalid counts"]),
    "shard counts past int64": (lambda path, manifest: edit_header(path, lambda header: header.update(
        tables=[dict(header["tables"][0], file=f"{manifest.write_id}-{k:016x}.arrow", num_shards=2**62 - 1)
                for k in range(3)])), ["more shards, rows or bytes"]),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_shard_table_is_a_clear_error_naming_it(tmp_path, damage):
    path = str(tmp_path / "cache")
    manifest = write_shards([row(i) for i in range(9)], path, FEATURES, max_rows_per_shard=3, batch_size=3)
    do, words = DAMAGES[damage]
    do(path, manifest)

    def open_and_read():
        backend = ArrowBackend.open(path)  # a sound header: the table is read on the first row
        return backend.slice(0, 9)

    for read in (open_and_read, lambda: list(ShardedDataset(path))):
        with pytest.raises(CorruptCacheError) as raised:
            read()
        assert all(word in str(raised.value) for word in words), raised.value
    report = verify(path)
    assert not report.ok and any(words[-1] in problem or "_tables/" in problem for problem in report.problems), \
        report.problems
    if damage == "missing":
        with pytest.raises(CorruptCacheError, match="gc cannot tell which shards version 1 lists, so it removes"):
            gc.collect_garbage(path, gc.Retention(keep=1, min_age=datetime.timedelta(0)))
