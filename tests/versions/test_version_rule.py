"""One rule for the latest version, which readers, writers, gc and log share (issue 35), and what a write lists (issue 34).

The latest version is the end of the run of version files after `_metadata.json`'s; a file past a
gap, or of another cache, is a stray that everyone ignores and `gc --dry_run` and `verify` report;
a damaged version file never stops a write, `log` or `gc`. Each case of the hostile review is a
test here, named for it, on a local disk and (where a store has such a file) on S3 and GCS.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil

import pytest

from beam_shards import (ArrowBackend, CacheError, CorruptCacheError, Features, Retention, ShardedDataset, Value,
                         VersionNotFoundError, list_versions, read_metadata, verify, write_shards)
from beam_shards.cli import commands as cli
from beam_shards.format.layout import MANIFEST_NAME, STAGING_DIR, TABLES_DIR, VERSIONS_DIR, CacheLayout, version_name
from beam_shards.storage import fs
from beam_shards.versions import commit
from beam_shards.versions.gc import collect_garbage

from _paths import DATA

pytestmark = pytest.mark.timeout(120)

SMALL = Features({"id": Value("int64"), "who": Value("string")})
NO_AGE = Retention(keep=1, min_age=datetime.timedelta(0))


def rows(first: int, count: int) -> list[dict]:
    return [{"id": i, "who": "w"} for i in range(first, first + count)]


def ids(path: str, version: int | None = None) -> list[int]:
    backend = ArrowBackend.open(path, version=version)
    return backend.slice(0, backend.num_rows).column("id").to_pylist()


def two_versions(path: str) -> None:
    """Version 1 holds ids 0-4; version 2 appends 10-14."""
    write_shards(rows(0, 5), path, SMALL, retention=None)
    write_shards(rows(10, 5), path, SMALL, mode="append", retention=None)


def plant(path: str, number: int, data: bytes) -> str:
    """Puts `data` at `_versions/<number>.json` of the cache at `path`; returns the file's name in the cache."""
    target = CacheLayout(path).version(number)
    fs.delete([target])
    assert fs.create_if_absent(target, data, target + ".planted.tmp")
    return f"{VERSIONS_DIR}/{version_name(number)}"


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def assert_writes_log_and_gc_work_past(path: str, capsys, planted: str) -> None:
    """The cache at `path` (two versions, something planted in `_versions/`) is read, logged, collected
    and appended to as if the planted file were not there, and gc --dry_run and verify name it."""
    assert read_metadata(path).version == 2 and ids(path) == list(range(5)) + list(range(10, 15))
    assert [row["id"] for row in ShardedDataset(path)] == list(range(5)) + list(range(10, 15))
    code, out = run_cli(capsys, "log", path)
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:3]] == ["2", "1"], out
    code, out = run_cli(capsys, "gc", path, "--dry_run")
    assert code == 0 and planted in out, out
    report = verify(path)
    assert not report.ok and any(planted in problem for problem in report.problems), report.problems
    collect_garbage(path)
    assert read_metadata(path).version == 2, "gc left the latest where readers read it"
    appended = write_shards(rows(20, 5), path, SMALL, mode="append")
    assert appended.parent_version == 2, "the append built on what readers read"
    assert read_metadata(path).version == appended.version and ids(path) == (
        list(range(5)) + list(range(10, 15)) + list(range(20, 25)))
    assert write_shards(rows(30, 5), path, SMALL).num_rows == 5 and ids(path) == list(range(30, 35))
    code, _ = run_cli(capsys, "log", path)
    assert code == 0


# --- a damaged version file after the latest stops nothing ----------------------------------------

DAMAGE = {"garbled": b"{not json", "empty": b"", "a header of another version": None}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_next_version_file_stops_no_write_log_or_gc(tmp_path, capsys, damage):
    path = str(tmp_path / "cache")
    two_versions(path)
    data = DAMAGE[damage]
    planted = plant(path, 3, data if data is not None else fs.read_bytes(CacheLayout(path).version(1)))
    assert_writes_log_and_gc_work_past(path, capsys, planted)


def test_a_dangling_next_version_file_stops_no_write_log_or_gc(tmp_path, capsys):
    path = str(tmp_path / "cache")
    two_versions(path)
    os.symlink(str(tmp_path / "nowhere.json"), CacheLayout(path).version(3))
    assert_writes_log_and_gc_work_past(path, capsys, f"{VERSIONS_DIR}/{version_name(3)}")
    assert not os.path.exists(tmp_path / "nowhere.json"), "nothing was written through the link"


def test_a_damaged_older_version_file_stops_no_write_log_or_gc(tmp_path, capsys):
    path = str(tmp_path / "cache")
    for start in (0, 10, 20):
        write_shards(rows(start, 5), path, SMALL, retention=None)
    planted = plant(path, 1, b"{not json")
    code, out = run_cli(capsys, "log", path)
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:3]] == ["3", "2"], out
    assert [m.version for m in list_versions(path)] == [2, 3]
    code, out = run_cli(capsys, "gc", path, "--dry_run")
    assert code == 0 and planted in out, out
    collect_garbage(path, NO_AGE)
    assert write_shards(rows(30, 5), path, SMALL, mode="append").version == 4
    assert ids(path) == list(range(20, 25)) + list(range(30, 35))


def test_a_damaged_pointer_that_is_all_there_is_stops_gc_and_writes_with_nothing_removed(tmp_path):
    """A format-1 cache has no `_versions/` to write `_metadata.json` again from."""
    path = str(tmp_path / "cache")
    shutil.copytree(os.path.join(DATA, "format1_cache"), path)
    with open(os.path.join(path, MANIFEST_NAME), "w") as handle:
        handle.write("{not json")
    before = sorted(os.listdir(path))
    for call in (lambda: collect_garbage(path, NO_AGE), lambda: write_shards(rows(0, 5), path, SMALL, mode="append")):
        with pytest.raises(CorruptCacheError, match="_metadata.json is not valid JSON"):
            call()
    assert sorted(os.listdir(path)) == before


def test_a_version_readers_pass_over_cannot_be_pinned(tmp_path):
    path = str(tmp_path / "cache")
    two_versions(path)
    plant(path, 3, b"{not json")
    renumbered_copy(path, 999999, edit_header=True)
    with pytest.raises(CorruptCacheError, match="has no version 3: .*00000000000000000003.json is not valid JSON"):
        read_metadata(path, version=3)
    with pytest.raises(VersionNotFoundError, match=r"has no version 999999: .*\(kept: 1-2\)"):
        ArrowBackend.open(path, version=999999)
    assert ids(path, version=1) == list(range(5))


# --- strays: past a gap, or of another cache -------------------------------------------------------

def renumbered_copy(path: str, number: int, edit_header: bool) -> str:
    """Version 1's header copied to `_versions/<number>.json`, its own number edited to match or not."""
    data = json.loads(fs.read_bytes(CacheLayout(path).version(1)))
    if edit_header:
        data.update(version=number, parent_version=number - 1)
    return plant(path, number, json.dumps(data).encode())


@pytest.mark.parametrize("edit_header", [False, True], ids=["copied", "renumbered inside too"])
def test_a_far_future_stray_neither_moves_the_pointer_nor_takes_an_append(tmp_path, capsys, edit_header):
    """The review's case: a copy of version 1 as `_versions/999999.json`; gc pointed `_metadata.json` at it and
    an append built on it (publishing version 1000000 without version 2's rows)."""
    path = str(tmp_path / "cache")
    two_versions(path)
    planted = renumbered_copy(path, 999999, edit_header)
    collect_garbage(path)
    assert json.loads(fs.read_bytes(CacheLayout(path).manifest))["version"] == 2, "gc moved the pointer to the stray"
    assert write_shards(rows(20, 5), path, SMALL, mode="append").version == 3
    assert ids(path) == list(range(5)) + list(range(10, 15)) + list(range(20, 25))
    code, out = run_cli(capsys, "gc", path, "--dry_run")
    assert code == 0 and planted in out and "stray" in out, out
    assert any(planted in problem and "stray" in problem for problem in verify(path).problems)
    assert os.path.exists(os.path.join(path, planted)), "a stray is reported, never deleted"


def other_cache_version(tmp_path, number: int) -> bytes:
    """The header of version `number` of another cache (of the same features, made the same way)."""
    other = str(tmp_path / "other")
    for start in range(number):
        write_shards(rows(100 * start, 3), other, SMALL, mode="append", retention=None)
    return fs.read_bytes(CacheLayout(other).version(number))


def test_a_version_file_of_another_cache_at_the_next_number_takes_no_reader_down(tmp_path, capsys):
    path = str(tmp_path / "cache")
    two_versions(path)
    planted = plant(path, 3, other_cache_version(tmp_path, 3))
    assert_writes_log_and_gc_work_past(path, capsys, planted)


def test_a_version_after_a_gap_is_a_stray_even_once_the_gap_is_filled(tmp_path, capsys):
    """A writer publishes into the gap before a stray; the stray does not then become the latest."""
    path = str(tmp_path / "cache")
    two_versions(path)
    planted = renumbered_copy(path, 4, edit_header=True)
    assert write_shards(rows(20, 5), path, SMALL, mode="append").version == 3
    assert read_metadata(path).version == 3 and ids(path) == list(range(5)) + list(range(10, 15)) + list(range(20, 25))
    collect_garbage(path)
    assert read_metadata(path).version == 3
    assert write_shards(rows(30, 5), path, SMALL, mode="append").parent_version == 3
    code, out = run_cli(capsys, "gc", path, "--dry_run")
    assert code == 0 and planted in out, out


# --- the cache id -----------------------------------------------------------------------------------

def headers(path: str) -> list[dict]:
    folder = os.path.join(path, VERSIONS_DIR)
    return [json.loads(open(os.path.join(folder, name)).read()) for name in sorted(os.listdir(folder))]


def test_every_version_header_carries_the_cache_id_of_the_first_version(tmp_path):
    path, other = str(tmp_path / "cache"), str(tmp_path / "other")
    write_shards(rows(0, 5), path, SMALL)
    write_shards(rows(10, 5), path, SMALL, mode="append")
    write_shards(rows(20, 5), path, SMALL)  # an overwrite is a version of the same cache
    write_shards(rows(0, 5), other, SMALL)
    found = {h["cache_id"] for h in headers(path)} | {json.loads(open(os.path.join(path, MANIFEST_NAME)).read())["cache_id"]}
    assert len(found) == 1 and len(found.pop()) == 32
    assert headers(other)[0]["cache_id"] != headers(path)[0]["cache_id"]
    assert read_metadata(path).cache_id == headers(path)[0]["cache_id"]


def strip_ids(path: str, names: list[str]) -> None:
    """Removes the cache id from the headers `names` (relative to the cache), as a beam_shards before ids wrote them."""
    for name in names:
        where = os.path.join(path, name)
        data = json.loads(open(where).read())
        data.pop("cache_id", None)
        with open(where, "w") as handle:
            handle.write(json.dumps(data))


def test_a_cache_written_before_ids_opens_and_takes_an_id_with_its_next_version(tmp_path):
    path = str(tmp_path / "cache")
    two_versions(path)
    strip_ids(path, [MANIFEST_NAME] + [f"{VERSIONS_DIR}/{n}" for n in sorted(os.listdir(os.path.join(path, VERSIONS_DIR)))])
    assert read_metadata(path).cache_id is None and ids(path) == list(range(5)) + list(range(10, 15))
    third = write_shards(rows(20, 5), path, SMALL, mode="append")
    assert third.version == 3 and len(third.cache_id) == 32
    assert write_shards(rows(30, 5), path, SMALL, mode="append").cache_id == third.cache_id
    assert [m.version for m in list_versions(path)] == [1, 2, 3, 4] and verify(path).ok


def test_a_version_without_an_id_after_one_with_an_id_is_of_the_same_cache(tmp_path):
    """An older beam_shards appends a version without an id: it is the latest, and the id carries on."""
    path = str(tmp_path / "cache")
    two_versions(path)
    first_id = read_metadata(path).cache_id
    write_shards(rows(20, 5), path, SMALL, mode="append")
    strip_ids(path, [MANIFEST_NAME, f"{VERSIONS_DIR}/{version_name(3)}"])
    assert read_metadata(path).version == 3 and read_metadata(path).cache_id is None
    fourth = write_shards(rows(30, 5), path, SMALL, mode="append")
    assert fourth.version == 4 and fourth.parent_version == 3 and len(fourth.cache_id) == 32
    assert ids(path) == list(range(5)) + list(range(10, 15)) + list(range(20, 25)) + list(range(30, 35))
    assert [m.version for m in list_versions(path)] == [1, 2, 3, 4], first_id


def test_a_version_with_an_id_after_one_without_is_of_the_same_cache(tmp_path, monkeypatch):
    """A cache written before ids takes its first version with an id, committed before the pointer moved."""
    path = str(tmp_path / "cache")
    two_versions(path)
    strip_ids(path, [MANIFEST_NAME, f"{VERSIONS_DIR}/{version_name(1)}", f"{VERSIONS_DIR}/{version_name(2)}"])
    monkeypatch.setattr(commit, "update_pointer", lambda *args: None)  # the writer dies right after its commit
    third = write_shards(rows(20, 5), path, SMALL, mode="append", retention=None)
    monkeypatch.undo()
    assert json.loads(open(os.path.join(path, MANIFEST_NAME)).read())["version"] == 2, "the pointer stayed"
    assert read_metadata(path).version == 3 and read_metadata(path).cache_id == third.cache_id
    assert write_shards(rows(30, 5), path, SMALL, mode="append").cache_id == third.cache_id


def test_a_next_version_file_of_another_cache_is_a_stray_whatever_its_id(tmp_path):
    """Its parent is another write than the latest (its id alone cannot tell, for a cache written before ids)."""
    path = str(tmp_path / "cache")
    two_versions(path)
    strip_ids(path, [MANIFEST_NAME, f"{VERSIONS_DIR}/{version_name(2)}"])
    plant(path, 3, other_cache_version(tmp_path, 3))
    assert read_metadata(path).version == 2 and write_shards(rows(20, 5), path, SMALL, mode="append").version == 4


def test_a_cache_id_that_is_not_one_is_a_corrupt_header(tmp_path):
    path = str(tmp_path / "cache")
    write_shards(rows(0, 5), path, SMALL)
    where = os.path.join(path, MANIFEST_NAME)
    data = json.loads(open(where).read())
    data["cache_id"] = "../x"
    with open(where, "w") as handle:
        handle.write(json.dumps(data))
    with pytest.raises(CorruptCacheError, match="cache id"):
        read_metadata(path)


# --- folders that are links are refused -----------------------------------------------------------

@pytest.mark.parametrize("folder", [TABLES_DIR, VERSIONS_DIR, STAGING_DIR])
def test_a_folder_of_the_cache_that_is_a_link_is_refused_by_writes_and_gc(tmp_path, folder):
    """The review's case: `_tables` as a link out of the cache let a write's retention delete files behind it."""
    path = str(tmp_path / "cache")
    two_versions(path)
    outside = str(tmp_path / "outside")
    if os.path.isdir(os.path.join(path, folder)):
        shutil.move(os.path.join(path, folder), outside)
    else:
        os.makedirs(outside)
    with open(os.path.join(outside, "precious"), "w") as handle:
        handle.write("keep me")
    before = sorted(os.listdir(outside))
    os.symlink(outside, os.path.join(path, folder))
    for call in (lambda: write_shards(rows(20, 5), path, SMALL, retention=NO_AGE),
                 lambda: write_shards(rows(20, 5), path, SMALL, mode="append", retention=NO_AGE),
                 lambda: collect_garbage(path, NO_AGE)):
        with pytest.raises(CacheError, match=f"{folder} is a symbolic link"):
            call()
    assert sorted(os.listdir(outside)) == before, "files behind the link were touched"


# --- what a write costs on an object store (issue 34) ----------------------------------------------

def versions_listings(requests: list[tuple[str, str]]) -> list[str]:
    """The listings of `_versions/` among an S3 proxy's requests."""
    return [target for method, target in requests
            if method == "GET" and "prefix=" in target and VERSIONS_DIR in target.split("prefix=", 1)[1]]


def test_a_write_lists_the_versions_folder_at_most_twice_and_asks_once_if_it_published(faulty_s3, monkeypatch):
    """The review's count: a clean write listed `_versions/` six times and asked twice whether it had published."""
    store, proxy = faulty_s3
    path = store.uri("cache")
    asked, real = [], commit.find_published
    monkeypatch.setattr(commit, "find_published", lambda *args, **kwargs: asked.append(args[:3]) or real(*args, **kwargs))
    counts = []
    for mode, first in (("overwrite", 0), ("append", 10), ("append", 20), ("overwrite", 30)):
        proxy.requests.clear()
        asked.clear()
        write_shards(rows(first, 5), path, SMALL, mode=mode)
        counts.append(len(versions_listings(proxy.requests)))
        assert len(asked) == len(set(asked)) == 1, (mode, asked)
    assert max(counts) <= 2 and sum(counts) >= 1, counts  # the retention of a third version lists it
    assert read_metadata(path).version == 4 and ids(path) == list(range(30, 35))


# --- the same on S3 and GCS ------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["garbled next", "empty next", "far-future stray", "another cache's next"])
def test_the_rule_holds_on_object_stores(store, tmp_path, capsys, case):
    path = store.uri("cache")
    two_versions(path)
    if case == "far-future stray":
        planted = renumbered_copy(path, 999999, edit_header=True)
        collect_garbage(path)
        assert json.loads(fs.read_bytes(CacheLayout(path).manifest))["version"] == 2
        assert write_shards(rows(20, 5), path, SMALL, mode="append").version == 3
        assert ids(path) == list(range(5)) + list(range(10, 15)) + list(range(20, 25))
        code, out = run_cli(capsys, "gc", path, "--dry_run")
        assert code == 0 and planted in out, out
        return
    data = {"garbled next": b"{not json", "empty next": b""}.get(case)
    planted = plant(path, 3, data if data is not None else other_cache_version(tmp_path, 3))
    assert_writes_log_and_gc_work_past(path, capsys, planted)
