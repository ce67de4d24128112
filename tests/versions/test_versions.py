"""Versions (format 2): immutable numbered versions, a commit that cannot succeed twice, retention, modes.

Each scenario of the versions issue is a test here: a retried finalize after a newer
write, gc racing a publish, gc on a folder that is not a cache, write ids that would
widen a delete, and a reader pinned to a version while others publish.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import threading
import time

import apache_beam as beam
import pytest

from beam_shards import (ArrowBackend, CacheExistsError, CacheNotFoundError, CorruptCacheError, Features, PublishError,
                         Retention, SchemaMismatchError, ShardedDataset, Value, VersionNotFoundError,
                         WriteInProgressError, WriteToArrowShards, list_versions, read_metadata, verify, write_shards)
from beam_shards.format.version_files import read_pointer
from beam_shards.format.layout import MANIFEST_NAME, VERSIONS_DIR, CacheLayout, classify, new_write_id, shard_name
from beam_shards.format.manifest import ShardInfo
from beam_shards.shards.options import WriterOptions
from beam_shards.versions import commit, staging
from beam_shards.versions.gc import collect_garbage, find_garbage, retained
from beam_shards.versions.lock import cache_lock

from _paths import DATA
from _support import FEATURES, example, options, race_to_create, stage as stage_shards

SMALL = Features({"id": Value("int64"), "who": Value("string")})
FORMAT1 = os.path.join(DATA, "format1_cache")
NOW = datetime.datetime.now(datetime.timezone.utc)


def rows(first: int, count: int, who: str = "w") -> list[dict]:
    return [{"id": i, "who": who} for i in range(first, first + count)]


def ids(path: str, version: int | None = None) -> list[int]:
    backend = ArrowBackend.open(path, version=version)
    return backend.slice(0, backend.num_rows).column("id").to_pylist()


def stage(path: str, write_id: str, examples: list[dict]):
    return stage_shards(path, write_id, examples, SMALL)


def publish(path: str, write_id: str, staged, mode: str = "overwrite"):
    return commit.publish(path, write_id=write_id, features=SMALL, staged=staged, options=WriterOptions(),
                          metadata={}, mode=mode)


def test_every_publish_is_a_new_immutable_version(tmp_path):
    path = str(tmp_path / "cache")
    first = write_shards(rows(0, 30), path, SMALL, shard_size_bytes=2_000)
    first_files = {name: open(os.path.join(path, name), "rb").read() for name in os.listdir(path)
                   if name.startswith("shard-")}
    second = write_shards(rows(100, 10), path, SMALL)
    assert (first.version, second.version) == (1, 2) and second.parent_version == 1
    assert [m.version for m in list_versions(path)] == [1, 2]
    assert ids(path) == list(range(100, 110)) and ids(path, version=1) == list(range(30))
    for name, data in first_files.items():
        assert open(os.path.join(path, name), "rb").read() == data, "a published shard changed"
    assert read_metadata(path).version == 2 and read_metadata(path, version=1).write_id == first.write_id
    with open(os.path.join(path, MANIFEST_NAME)) as handle:
        assert json.load(handle)["format_version"] == 5, "_metadata.json holds the latest version's header"
    with pytest.raises(VersionNotFoundError, match=r"no version 7:.*kept: 1-2"):
        read_metadata(path, version=7)


def test_retried_finalize_after_a_newer_write_publishes_nothing(tmp_path):
    """Scenario 1: Dataflow retries a finalize after another write to the path published."""
    path = str(tmp_path / "cache")
    older = new_write_id()
    staged = stage(path, older, rows(0, 20, "older"))
    first = publish(path, older, staged)
    newer = write_shards(rows(100, 20, "newer"), path, SMALL)
    again = publish(path, older, staged)  # the retried finalize, with the same staged list
    assert again.version == first.version == 1 and newer.version == 2
    assert read_metadata(path).version == 2 and ids(path) == list(range(100, 120))
    assert [m.version for m in list_versions(path)] == [1, 2]
    assert verify(path).ok and verify(path, version=1).ok


def test_finalize_run_twice_at_once_publishes_once(tmp_path):
    path = str(tmp_path / "cache")
    write_id = new_write_id()
    staged = stage(path, write_id, rows(0, 40))
    results, errors = [], []

    def run():
        try:
            results.append(publish(path, write_id, staged))
        except Exception as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and len(results) == 4
    assert {m.version for m in results} == {1} and [m.version for m in list_versions(path)] == [1]
    assert sorted(ids(path)) == list(range(40))


def test_create_if_absent_lets_exactly_one_racer_win(tmp_path):
    target = str(tmp_path / "_versions" / "00000000000000000001.json")
    winners = race_to_create(target)
    assert len(winners) == 1
    assert open(target).read() == f"writer {winners[0]}"
    assert os.listdir(os.path.dirname(target)) == ["00000000000000000001.json"], "temporary files were left"


def test_a_writer_that_loses_the_race_publishes_the_next_version(tmp_path, monkeypatch):
    """Two writers read the same latest version; the second one's create fails and it takes N+2."""
    path = str(tmp_path / "cache")
    write_shards(rows(0, 5), path, SMALL)
    slow = new_write_id()
    staged = stage(path, slow, rows(50, 5, "slow"))
    calls = {"n": 0}
    real = commit.resolve

    def first_call_stale(p, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:  # another writer (on an object store: no lock) commits version 2 meanwhile
            stale = real(p)
            fast = new_write_id()
            staged_fast = stage(path, fast, rows(10, 5, "fast"))
            names = [shard_name(fast, i, len(staged_fast)) for i in range(len(staged_fast))]
            staging.move_into_place(CacheLayout(path), staged_fast, names)
            added = [(ShardInfo(n, s.num_rows, s.num_bytes, s.checksum), s.batch_rows, s.batch_spans)
                     for n, s in zip(names, staged_fast)]
            real_commit(CacheLayout(path), fast, SMALL, added, None, WriterOptions(), {}, "append", None, {}, None)
            return stale
        return real(p, **kwargs)

    real_commit = commit._commit

    monkeypatch.setattr(commit, "resolve", first_call_stale)
    manifest = publish(path, slow, staged, mode="append")
    assert manifest.version == 3 and manifest.parent_version == 2
    assert ids(path) == list(range(0, 5)) + list(range(10, 15)) + list(range(50, 55)), "append re-based on the winner"
    assert [m.write_id for m in list_versions(path)][-1] == slow


def test_gc_cannot_delete_what_a_publish_is_moving(tmp_path):
    """Scenario 2: gc takes the lock publishing holds, and keeps young unreferenced shards."""
    path = str(tmp_path / "cache")
    write_shards(rows(0, 5), path, SMALL)
    with cache_lock(CacheLayout(path)):
        with pytest.raises(WriteInProgressError, match="is running"):
            collect_garbage(path, Retention(keep=1, min_age=datetime.timedelta(0)))
    running = new_write_id()
    moved = os.path.join(path, shard_name(running, 0, 1))
    shutil.copy(read_metadata(path).shard_path(0), moved)
    collect_garbage(path)  # default min_age: a shard of a write that started just now stays
    assert os.path.exists(moved)


def test_gc_on_a_folder_that_is_not_a_cache_deletes_nothing(tmp_path):
    """Scenario 3: a user's folder that merely has a `_staging/` sub-folder."""
    folder = tmp_path / "photos"
    (folder / "_staging" / "holiday").mkdir(parents=True)
    (folder / "_staging" / "holiday" / "part-00000.arrow").write_bytes(b"mine")
    (folder / "_staging" / "a.jpg").write_bytes(b"mine")
    with pytest.raises(CacheNotFoundError, match="not a beam_shards cache"):
        collect_garbage(str(folder), Retention(keep=1, min_age=datetime.timedelta(0)))
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == ["a.jpg", "part-00000.arrow"]


@pytest.mark.parametrize("write_id", ["", "*", "../x", "20250101T000000Z-*", "..", None, 7])
def test_abandon_refuses_anything_but_a_write_id(tmp_path, write_id):
    path = str(tmp_path / "cache")
    write_shards(rows(0, 5), path, SMALL)
    outside = tmp_path / "x"
    outside.mkdir()
    (outside / "keep").write_bytes(b"keep")
    before = sorted(os.listdir(path))
    with pytest.raises(ValueError, match="not a beam_shards write id"):
        commit.abandon(path, write_id)
    assert sorted(os.listdir(path)) == before and (outside / "keep").exists()
    assert verify(path).ok


def test_a_pinned_reader_reads_its_version_while_others_publish(tmp_path):
    """Scenario 4: a training job reading version N while the path is overwritten twice."""
    path = str(tmp_path / "cache")
    write_shards(rows(0, 200), path, SMALL, shard_size_bytes=1_500)
    reader = ShardedDataset(path, image_mode="bytes")
    first_rows = [reader[i]["id"] for i in range(5)]
    write_shards(rows(1000, 10), path, SMALL)
    write_shards(rows(2000, 10), path, SMALL)
    assert read_metadata(path).version == 3
    assert first_rows + [reader[i]["id"] for i in range(5, 200)] == list(range(200))
    assert "version=1" in repr(reader) and "version=1" in repr(reader.backend)


def test_retention_removes_old_versions_and_only_their_files(tmp_path):
    path = str(tmp_path / "cache")
    for n in range(4):
        write_shards(rows(n * 100, 10), path, SMALL, retention=None)
    write_shards(rows(900, 5), path, SMALL, mode="append", retention=None)
    young = find_garbage(path)  # defaults: every version is younger than 7 days
    assert young.removed_versions == [] and young.files == {}
    removed = collect_garbage(path, Retention(keep=2, min_age=datetime.timedelta(0)))
    assert removed.removed_versions == [1, 2, 3] and removed.kept_versions == [4, 5]
    assert [m.version for m in list_versions(path)] == [4, 5]
    assert ids(path) == list(range(300, 310)) + list(range(900, 905))
    assert ids(path, version=4) == list(range(300, 310)), "shards an append reuses stay"
    with pytest.raises(VersionNotFoundError):
        ArrowBackend.open(path, version=2)
    listed = {s.file for m in list_versions(path) for s in m.shards}
    assert {n for n in os.listdir(path) if n.startswith("shard-")} == listed


def test_retention_plan_keeps_recently_superseded_versions():
    made = [_manifest(n, NOW - datetime.timedelta(days=30 - n * 5)) for n in range(1, 6)]
    removed = retained(made, 5, Retention(keep=1, min_age=datetime.timedelta(days=12)), NOW)
    # version n is superseded when n+1 is created: 30-5(n+1) days ago; kept when that is under 12 days.
    assert removed == [1, 2]
    removed = retained(made, 3, Retention(keep=1, min_age=datetime.timedelta(0)), NOW)
    assert removed == [1, 2, 4], "the version _metadata.json names is always kept"


def test_classify_names_only_what_beam_shards_writes():
    write_id = "20250101T000000Z-0000000a"
    assert classify(f"shard-{write_id}-00000-of-00001.arrow") == ("shard", write_id)
    assert classify(f"_staging/{write_id}/{'f' * 32}/part-00000.arrow") == ("staged", write_id)
    assert classify(f"{MANIFEST_NAME}.{write_id}.0123abcd.tmp") == ("temporary", write_id)
    assert classify(f"{VERSIONS_DIR}/00000000000000000003.json") == ("version", None)
    for other in ("shard-notes.arrow", "_staging/x/part-00000.arrow", f"_staging/{write_id}/part-00000.arrow",
                  f"sub/shard-{write_id}-00000-of-00001.arrow", "_versions/3.json", "_metadata.json.tmp",
                  f"_staging/{write_id}/{'f' * 32}/notes.txt"):
        assert classify(other) is None, other


def test_modes(tmp_path):
    path = str(tmp_path / "cache")
    with pytest.raises(ValueError, match="mode must be one of"):
        write_shards(rows(0, 1), path, SMALL, mode="replace")
    write_shards(rows(0, 10), path, SMALL, mode="error")
    with pytest.raises(CacheExistsError, match="mode='error'"):
        write_shards(rows(0, 10), path, SMALL, mode="error")
    with pytest.raises(CacheExistsError):
        WriteToArrowShards(path, SMALL, mode="error")
    before = sorted(os.listdir(path))
    other = Features({"id": Value("int32"), "who": Value("string")})
    with pytest.raises(SchemaMismatchError, match="cannot append"):
        write_shards(rows(0, 10), path, other, mode="append")
    with pytest.raises(SchemaMismatchError, match="compression"):
        write_shards(rows(0, 10), path, SMALL, mode="append", compression="zstd")
    assert sorted(os.listdir(path)) == before and read_metadata(path).version == 1
    first = read_metadata(path)
    appended = write_shards(rows(10, 5), path, SMALL, mode="append")
    assert appended.shards[:first.num_shards] == first.shards, "append reuses the shards, no copy"
    assert ids(path) == list(range(15)) and appended.mode == "append"


def test_append_in_a_pipeline(tmp_path):
    path = str(tmp_path / "cache")
    write_shards(rows(0, 10), path, SMALL)
    with beam.Pipeline(options=options()) as p:
        _ = (p | beam.Create(rows(10, 20)) | WriteToArrowShards(path, SMALL, mode="append"))
    assert sorted(ids(path)) == list(range(30)) and read_metadata(path).version == 2


def test_format1_cache_reads_as_version_1_and_takes_new_versions(tmp_path):
    path = str(tmp_path / "old")
    shutil.copytree(FORMAT1, path)
    manifest = read_metadata(path)
    assert manifest.version == 1 and manifest.num_rows == 40 and manifest.parent_version is None
    assert verify(path).ok and [m.version for m in list_versions(path)] == [1]
    dataset = ShardedDataset(path, image_mode="bytes")
    assert [row["id"] for row in dataset] == list(range(40))
    assert dataset[3]["caption"] == example(3)["caption"] and dataset[3]["image"] == example(3)["image"]
    write_shards((example(i) for i in range(40, 45)), path, FEATURES, mode="append")
    assert [m.version for m in list_versions(path)] == [1, 2]
    assert ids(path, version=1) == list(range(40)) and ids(path) == list(range(45))
    assert os.path.exists(CacheLayout(path).version(1)), "the format-1 version is kept under _versions/"


def test_pointer_catches_up_after_a_writer_died_between_commit_and_pointer(tmp_path, monkeypatch):
    path = str(tmp_path / "cache")
    write_shards(rows(0, 5), path, SMALL)
    monkeypatch.setattr(commit, "update_pointer", lambda *args: None)  # the writer dies right after its commit
    write_id = new_write_id()
    publish(path, write_id, stage(path, write_id, rows(10, 5)))
    monkeypatch.undo()
    # Committed (its shards were in place first) is published: the newest version file decides.
    assert read_metadata(path).version == 2 and ids(path) == list(range(10, 15))
    assert read_pointer(path).version == 1 and commit.find_published(path, write_id).version == 2
    collect_garbage(path)
    assert read_pointer(path).version == 2, "gc brings the pointer up to date"


def test_a_reader_of_a_removed_version_gets_a_clear_error(tmp_path):
    path = str(tmp_path / "cache")
    write_shards(rows(0, 50), path, SMALL, shard_size_bytes=1_000)
    backend = ArrowBackend.open(path)
    backend.get_row(0)
    write_shards(rows(100, 5), path, SMALL)
    write_shards(rows(200, 5), path, SMALL)
    collect_garbage(path, Retention(keep=1, min_age=datetime.timedelta(0)))
    with pytest.raises(CorruptCacheError, match="removed by retention"):
        backend.get_row(49)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_writers_reader_and_gc_side_by_side(tmp_path, request):
    """Two writers (overwrite and append), a reader and gc loop for a bounded number of writes.

    Every version the reader opens must hold exactly the rows of the writes it is made
    of: none lost, none twice. A read may fail only because retention removed its
    version, and then with an error that says so.
    """
    path = str(tmp_path / "cache")
    write_shards(rows(0, 20, "seed"), path, SMALL)
    writes_each, stop = 60, threading.Event()
    outcome = {"reads": 0, "removed": 0, "gc": 0, "versions_removed": 0, "lost_or_duplicated": 0}
    errors = []

    def writer(mode: str, base: int):
        try:
            for n in range(writes_each):
                first = base + n * 10
                write_shards(rows(first, 10, f"{mode}{n}"), path, SMALL, mode=mode, retention=None)
        except Exception as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    def reader():
        while not stop.is_set():
            try:
                manifest = read_metadata(path, check_files=False)
                backend = ArrowBackend.open(path, version=manifest.version)
                table = backend.slice(0, backend.num_rows)
            except (CorruptCacheError, CacheNotFoundError) as error:
                if "removed by retention" not in str(error) and "no version" not in str(error):
                    errors.append(error)
                outcome["removed"] += 1
                continue
            outcome["reads"] += 1
            got = table.column("id").to_pylist()
            expected = _expected_ids(set(table.column("who").to_pylist()))
            if sorted(got) != sorted(expected) or len(set(got)) != len(got):
                outcome["lost_or_duplicated"] += 1

    def collector():
        while not stop.is_set():
            try:
                # Old enough that no running write's files qualify: min_age 0 is for when no write runs.
                garbage = collect_garbage(path, Retention(keep=3, min_age=datetime.timedelta(seconds=5)))
                outcome["gc"] += 1
                outcome["versions_removed"] += len(garbage.removed_versions)
            except WriteInProgressError:
                pass
            except Exception as error:  # noqa: BLE001 - collected and asserted below
                errors.append(error)
            time.sleep(0.01)

    writers = [threading.Thread(target=writer, args=("overwrite", 1_000_000)),
               threading.Thread(target=writer, args=("append", 2_000_000))]
    helpers = [threading.Thread(target=reader), threading.Thread(target=collector)]
    for thread in writers + helpers:
        thread.start()
    for thread in writers:
        thread.join(240)
    stop.set()
    for thread in helpers:
        thread.join(60)
    versions = [m.version for m in list_versions(path)]
    print(f"\nCONCURRENCY {2 * writes_each} writes, {outcome['reads']} reads, {outcome['removed']} reads of a removed "
          f"version, {outcome['gc']} gc runs removing {outcome['versions_removed']} versions, {outcome['lost_or_duplicated']} reads lost or duplicated rows; "
          f"latest version {versions[-1]}")
    assert not errors, errors[:3]
    assert outcome["lost_or_duplicated"] == 0 and outcome["reads"] > 0 and outcome["versions_removed"] > 0
    assert versions[-1] == 1 + 2 * writes_each, "every write published exactly one version"
    collect_garbage(path, Retention(keep=1, min_age=datetime.timedelta(0)))
    assert verify(path).ok and not os.path.exists(os.path.join(path, "_staging"))


def _expected_ids(whos: set[str]) -> list[int]:
    """The ids the writes named `whos` wrote: the seed's 20, and 10 for each other write."""
    expected = []
    for who in whos:
        if who == "seed":
            expected.extend(range(20))
            continue
        mode, n = who.rstrip("0123456789"), int(who.lstrip("abcdefghijklmnopqrstuvwxyz"))
        first = {"overwrite": 1_000_000, "append": 2_000_000}[mode] + n * 10
        expected.extend(range(first, first + 10))
    return expected


def _manifest(version: int, created: datetime.datetime):
    from beam_shards.format.manifest import Manifest

    return Manifest(path="/c", version=version, write_id=new_write_id(), features=SMALL, shards=(),
                    created=created.isoformat())


# --- a manifest readers would refuse is refused before commit (issue 24) --------------------

def test_metadata_a_reader_would_refuse_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(commit, "MAX_MANIFEST_BYTES", 20_000)
    path = str(tmp_path / "cache")
    with pytest.raises(ValueError, match="take 30,[0-9]{3} bytes in the manifest, more than the 20,000 a reader"):
        write_shards([{"x": 1}], path, Features({"x": Value("int64")}), metadata={"blob": "x" * 30_000})
    assert not os.path.exists(path)


def test_a_version_whose_manifest_a_reader_would_refuse_is_not_published(tmp_path, monkeypatch):
    path, features = str(tmp_path / "cache"), Features({"x": Value("int64")})
    write_shards(({"x": i} for i in range(3)), path, features)
    size = len(commit.read_version(path, 1).to_json())
    # Features and metadata fit (checked before the write runs); the header around them does not.
    monkeypatch.setattr(commit, "MAX_MANIFEST_BYTES", size - 100)
    with pytest.raises(PublishError, match="would have a header of .* bytes, more than .*nothing was published"):
        write_shards(({"x": i} for i in range(40)), path, features, max_rows_per_shard=1, mode="append")
    assert read_metadata(path).version == 1 and [m.version for m in list_versions(path)] == [1]
    assert not any(name.startswith("shard-") and name.count("-of-00040") for name in os.listdir(path))
    monkeypatch.undo()
    # The cache still takes writes, logs and collects.
    assert write_shards([{"x": 9}], path, features, mode="append").version == 2
    assert [m.version for m in list_versions(path)] == [1, 2]
    collect_garbage(path, Retention(keep=1, min_age=0))
    assert read_metadata(path).num_rows == 4


def test_a_finalize_that_looked_before_its_twin_committed_does_not_append_the_shards_twice(tmp_path, monkeypatch):
    """The hostile review's race (issue 24): two finalizes of one append at once on an object store, the
    second checking for its write just before the first commits, then reading that commit as the latest."""
    path = str(tmp_path / "cache")
    write_shards(rows(0, 10), path, SMALL)
    write_id = new_write_id()
    staged = stage(path, write_id, rows(100, 20))
    before = commit.resolve(path)  # what the twin finds when it looks just before the first commits
    first = publish(path, write_id, staged, mode="append")
    real, looks = commit.resolve, []

    def looked_too_early(*args, **kwargs):
        looks.append(args)
        return before if len(looks) == 1 else real(*args, **kwargs)

    monkeypatch.setattr(commit, "resolve", looked_too_early)
    second = publish(path, write_id, staged, mode="append")
    assert len(looks) >= 2, "the early look was forced"
    assert second.version == first.version == 2 and [m.version for m in list_versions(path)] == [1, 2]
    assert ids(path) == list(range(10)) + list(range(100, 120))


# --- the latest never moves back (issue 24) ------------------------------------------------------

def test_an_older_writers_late_pointer_update_does_not_move_the_latest_back(tmp_path):
    """A commits version 2 but its pointer update is slow; B commits 3 and moves the pointer; A's
    update (version 2) lands after, and A dies. Readers and writers still take version 3."""
    path = str(tmp_path / "cache")
    write_shards(rows(0, 5), path, SMALL)
    late = write_shards(rows(10, 5), path, SMALL)
    newest = write_shards(rows(20, 5), path, SMALL)
    with open(os.path.join(path, MANIFEST_NAME), "wb") as handle:  # A's late write of the pointer lands
        handle.write(late.to_json())
    assert read_pointer(path).version == 2, "the late update landed"
    assert read_metadata(path).version == newest.version == 3 and ids(path) == list(range(20, 25))
    assert ShardedDataset(path)[0]["id"] == 20
    assert write_shards(rows(30, 5), path, SMALL, mode="append").version == 4
    assert ids(path) == list(range(20, 25)) + list(range(30, 35))


def test_a_lost_newest_version_file_does_not_make_the_next_write_reuse_its_number(tmp_path):
    path = str(tmp_path / "cache")
    for start in (0, 10, 20):
        write_shards(rows(start, 5), path, SMALL)
    os.remove(CacheLayout(path).version(3))  # the newest version file lost; the pointer holds version 3
    assert read_metadata(path).version == 3
    assert write_shards(rows(30, 5), path, SMALL).version == 4
    assert read_metadata(path).version == 4 and ids(path) == list(range(30, 35))
    assert [m.version for m in list_versions(path)] == [1, 2, 4]


def test_a_damaged_version_file_above_the_pointer_leaves_readers_on_the_pointer(tmp_path):
    path = str(tmp_path / "cache")
    write_shards(rows(0, 5), path, SMALL)
    with open(CacheLayout(path).version(2), "w") as handle:
        handle.write("{not json")
    assert read_metadata(path).version == 1 and ids(path) == list(range(5))


# --- no single damaged version file stops writes, log or gc (issue 24) --------------------------

def run_log(capsys, path: str) -> list[str]:
    from beam_shards.cli import commands

    assert commands.main(["log", path]) == 0
    return [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]


def _damage(path: str, number: int) -> None:
    with open(CacheLayout(path).version(number), "w") as handle:
        handle.write("{not json")


def test_a_damaged_newest_version_file_is_served_by_the_pointer_that_copies_it(tmp_path, capsys):
    path = str(tmp_path / "cache")
    write_shards(rows(0, 5), path, SMALL)
    write_shards(rows(10, 5), path, SMALL, mode="append")
    _damage(path, 2)
    assert read_metadata(path).version == 2 and ids(path) == list(range(5)) + list(range(10, 15))
    assert [m.version for m in list_versions(path)] == [1, 2]
    assert run_log(capsys, path) == ["2", "1"]
    collect_garbage(path, Retention(keep=2, min_age=datetime.timedelta(0)))
    assert write_shards(rows(20, 5), path, SMALL, mode="append").version == 3
    assert ids(path) == list(range(5)) + list(range(10, 15)) + list(range(20, 25))


def test_a_damaged_older_version_file_is_ignored_by_writes_log_and_gc(tmp_path):
    path = str(tmp_path / "cache")
    for start in (0, 10, 20):
        write_shards(rows(start, 5), path, SMALL)
    _damage(path, 1)
    assert write_shards(rows(30, 5), path, SMALL).version == 4, "writes read only the newest version"
    assert [m.version for m in list_versions(path)] == [2, 3, 4]
    garbage = collect_garbage(path, Retention(keep=1, min_age=datetime.timedelta(0)))
    assert ids(path) == list(range(30, 35)) and [m.version for m in list_versions(path)] == [4]
    damaged = f"{VERSIONS_DIR}/{os.path.basename(CacheLayout(path).version(1))}"
    assert "is not valid JSON" in garbage.ignored[damaged] and os.path.exists(os.path.join(path, damaged))


def test_a_damaged_pointer_names_the_way_out_and_the_way_out_works(tmp_path):
    path = str(tmp_path / "cache")
    write_shards(rows(0, 5), path, SMALL)
    write_shards(rows(10, 5), path, SMALL, mode="append")
    with open(os.path.join(path, MANIFEST_NAME), "w") as handle:
        handle.write("{not json")
    with pytest.raises(CorruptCacheError, match="not valid JSON .* It is a copy of the newest version's header in .*"
                                                "`beam-shards gc .*` writes it again"):
        read_metadata(path)
    collect_garbage(path)
    assert read_metadata(path).version == 2 and ids(path) == list(range(5)) + list(range(10, 15))
    assert write_shards(rows(20, 5), path, SMALL, mode="append").version == 3
