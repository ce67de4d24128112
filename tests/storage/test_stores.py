"""gs:// and s3:// end to end against real protocol servers on 127.0.0.1 (moto, fake-gcs-server).

Every test runs on both stores (the `store` fixture, `_stores.py`): writers publish
there, readers read every row back, the commands work on the URI, the versioned
commit keeps its guarantees, and a bad configuration gets an error naming the URI.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beam_shards import (ArrowBackend, Features, ReadFromArrowShards, ShardedDataset, StoreAccessError, Value,
                         WriteToArrowShards, list_versions, read_metadata, verify, write_shards)
from beam_shards.cli import commands as cli
from beam_shards.errors import FileTooLargeError
from beam_shards.format.version_files import read_pointer
from beam_shards.format.layout import MANIFEST_NAME, TABLES_DIR, VERSIONS_DIR, new_write_id, version_name
from beam_shards.shards.options import WriterOptions
from beam_shards.storage import folders, fs
from beam_shards.versions import commit
from pipelines import csv as csv_pipeline, demo, image_folder, jsonl, parquet, tfrecord

from _reliability import SCRIPTS, VERSIONS, write_version
from _services import free_port
from _stores import STORE_VARIABLES
from _support import FEATURES, clean_up, example, jpeg, options, png, race_to_create, run_with_deadline, stage

SMALL = Features({"id": Value("int64"), "who": Value("string")})


def rows(first: int, count: int, who: str = "w") -> list[dict]:
    return [{"id": i, "who": who} for i in range(first, first + count)]


def all_ids(path: str, version: int | None = None) -> list[int]:
    backend = ArrowBackend.open(path, version=version)
    return backend.slice(0, backend.num_rows).column("id").to_pylist()


@pytest.mark.timeout(120)
def test_create_if_absent_lets_exactly_one_racer_win(store):
    target = store.uri("_versions", "00000000000000000001.json")
    winners = race_to_create(target)
    assert len(winners) == 1
    assert fs.read_bytes(target) == f"writer {winners[0]}".encode()
    assert list(folders.list_dir(store.uri("_versions"))) == [target]


@pytest.mark.timeout(300)
def test_an_object_replaced_while_it_is_read_is_read_whole(store):
    """The pointer `_metadata.json` is rewritten by each commit; a reader gets the old or the new, never a part."""
    target = store.uri("cache", MANIFEST_NAME)
    contents = [b"a" * 50, b"b" * 3000, b"c" * 700]
    fs.write_bytes(target, contents[0])
    stop, rewrites = threading.Event(), []

    def rewrite() -> None:
        while not stop.is_set():
            fs.write_bytes(target, contents[len(rewrites) % 3])
            rewrites.append(1)

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        reads = [fs.read_bytes(target, limit=4096) for _ in range(200)]
    finally:
        stop.set()
        writer.join()
    assert len(rewrites) > 20, "the object was hardly replaced while it was read"
    assert {len(read) for read in reads if read not in contents} == set()


@pytest.mark.timeout(120)
def test_reading_an_object_checks_its_size_and_that_it_exists(store):
    target = store.uri("cache", MANIFEST_NAME)
    fs.write_bytes(target, b"x" * 5000)
    with pytest.raises(FileTooLargeError, match="more than 4,096"):  # GCS reads no further than 4,097 bytes
        fs.read_bytes(target, limit=4096)
    assert fs.read_bytes(target, limit=5000) == b"x" * 5000
    with pytest.raises(FileNotFoundError, match=re.escape(store.uri("cache", "missing.json"))):
        fs.read_bytes(store.uri("cache", "missing.json"))


@pytest.mark.timeout(300)
def test_write_shards_publishes_and_every_reader_reads_it_back(store):
    path = store.uri("cache")
    write_shards(rows(0, 120), path, SMALL, shard_size_bytes=600, batch_size=10)
    write_shards(rows(1000, 30, "second"), path, SMALL, mode="append", shard_size_bytes=600, batch_size=10)
    manifest = read_metadata(path)
    assert manifest.version == 2 and manifest.num_rows == 150 and manifest.num_shards > 2
    assert [m.version for m in list_versions(path)] == [1, 2]
    assert sorted(all_ids(path)) == list(range(120)) + list(range(1000, 1030))
    assert sorted(all_ids(path, version=1)) == list(range(120))
    backend = ArrowBackend.open(path)
    assert backend.take([149, 0, 75]).column("id").to_pylist() == [all_ids(path)[i] for i in (149, 0, 75)]
    dataset = ShardedDataset(path)
    assert len(dataset) == 150 and sorted(row["id"] for row in dataset) == sorted(all_ids(path))
    assert dataset[-1]["who"] == "second"
    assert verify(path).ok


RUNNERS = {"in-process": [], "two processes": ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]}


def _part(part: int, count: int):
    return rows(part * count, count, f"part {part}")


@pytest.mark.timeout(600)
# Each runner on one store: the store's code is the same under both, and worker processes cost seconds.
@pytest.mark.parametrize("store, runner", [("s3", "in-process"), ("gs", "two processes")], indirect=["store"])
def test_pipelines_write_and_read_the_store(store, runner):
    path = store.uri("cache")
    with beam.Pipeline(options=options(*RUNNERS[runner])) as p:
        manifests = (p | beam.Create(range(4)) | beam.FlatMap(_part, 50)
                     | WriteToArrowShards(path, SMALL, shard_size_bytes=600, batch_size=10))
        assert_that(manifests | beam.Map(lambda m: (m.version, m.num_rows)), equal_to([(1, 200)]))
    assert sorted(all_ids(path)) == list(range(200)) and verify(path).ok
    assert not folders.list_dir(store.uri("cache", "_staging"), recursive=True), "staging was left behind"
    pipeline = beam.Pipeline(options=options(*RUNNERS[runner]))
    ids = pipeline | ReadFromArrowShards(path, columns=["id"], desired_split_bytes=300) | beam.Map(lambda r: r["id"])
    assert_that(ids, equal_to(list(range(200))))
    run_with_deadline(pipeline)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["s3"], indirect=True)
@pytest.mark.parametrize("deterministic", [False, True])
def test_pipeline_options_configure_s3_inside_a_pipeline(store, deterministic, monkeypatch):
    """Beam's --s3_* options alone, with no AWS variable set, serve the whole write, the commit included.
    A deterministic write also reads its staged pieces back with them (through pyarrow's S3
    filesystem, which once took the environment only: on a Flink cluster's workers it failed)."""
    server_env = store.server.env()
    for name in STORE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    path = store.uri("cache")
    elements = list(enumerate(rows(0, 300))) if deterministic else rows(0, 300)
    with beam.Pipeline(options=options(*store.server.s3_flags())) as p:
        _ = (p | beam.Create(elements, reshuffle=True)
             | WriteToArrowShards(path, SMALL, deterministic=deterministic, shard_size_bytes=2_000, batch_size=16))
    for name, value in server_env.items():
        monkeypatch.setenv(name, value)
    assert sorted(all_ids(path)) == list(range(300)) and read_metadata(path).num_shards >= 3


def _cli(capsys, *argv: str) -> str:
    code = cli.main(list(argv))
    out = capsys.readouterr().out
    assert code == 0, f"beam-shards {' '.join(argv)} exited {code}: {out}"
    return out


@pytest.mark.timeout(600)
def test_every_command_works_on_the_uri(store, tmp_path, capsys):
    path = store.uri("cache")
    write_shards((example(i) for i in range(40)), path, FEATURES, max_rows_per_shard=4, batch_size=2)
    write_shards((example(i) for i in range(40, 60)), path, FEATURES, mode="append", max_rows_per_shard=4,
                 batch_size=2)
    assert "rows         60" in _cli(capsys, "info", path)
    assert "rows         40" in _cli(capsys, "info", "--version", "1", path)
    log = _cli(capsys, "log", path)
    assert log.index("write") < log.index("append") and "overwrite" in log
    assert "example number 0" in _cli(capsys, "head", "-n", "3", path)
    _cli(capsys, "show", "--out", str(tmp_path / "sheet.png"), "-n", "6", "--tile", "32", path)
    assert (tmp_path / "sheet.png").read_bytes().startswith(b"\x89PNG")
    before = read_metadata(path)
    assert "into version 3" in _cli(capsys, "compact", "--shard_size", "1MB", path)
    compacted = read_metadata(path)
    assert compacted.version == 3 and compacted.num_shards < before.num_shards
    old_shards = {shard.file for shard in before.shards}
    _cli(capsys, "gc", "--keep", "1", "--min_age", "0", path)
    assert [m.version for m in list_versions(path)] == [3]
    left = {name.rsplit("/", 1)[-1] for name in folders.list_dir(path, recursive=True)}
    assert not left & old_shards, "gc left shards of removed versions"
    assert sorted(all_ids(path)) == list(range(60))
    if store.scheme == "s3":  # a fresh process configured by S3's environment alone: the killed writer's test
        assert "OK:" in _cli(capsys, "verify", path)
        return
    # As users run it: a fresh process configured by the environment alone.
    verified = subprocess.run([sys.executable, "-m", "beam_shards.cli", "verify", path], capture_output=True,
                              text=True, timeout=300, env=dict(os.environ))
    assert verified.returncode == 0, verified.stdout + verified.stderr


# --- every conversion pipeline with --output on the store: its inputs (made locally), rows -----

def _image_folder_input(folder) -> tuple[list[str], int]:
    for i, name in enumerate(["cat/a.jpg", "cat/b.png", "dog/c.jpg"]):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(png(i) if name.endswith(".png") else jpeg(i))
    return ["--input", str(folder)], 3


def _manifest_rows(folder) -> list[dict]:
    (folder / "a.jpg").write_bytes(jpeg(1))
    return [{"image": "a.jpg", "label": label, "caption": f"row {i}"} for i, label in enumerate("xyx")]


def _jsonl_input(folder) -> tuple[list[str], int]:
    rows_ = _manifest_rows(folder)
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows_))
    return ["--input", str(folder / "train.jsonl"), "--label_column", "label"], len(rows_)


def _csv_input(folder) -> tuple[list[str], int]:
    rows_ = _manifest_rows(folder)
    (folder / "train.csv").write_text("image,label,caption\n" + "".join(
        f"{row['image']},{row['label']},{row['caption']}\n" for row in rows_))
    return ["--input", str(folder / "train.csv"), "--label_column", "label"], len(rows_)


def _parquet_input(folder) -> tuple[list[str], int]:
    pq.write_table(pa.table({"text": ["a", "b", "c", "d"], "n": [1, 2, 3, 4]}), folder / "train.parquet")
    return ["--input", str(folder / "train.parquet")], 4


def _tfrecord_input(folder) -> tuple[list[str], int]:
    import tfrecord as tfrecord_package

    writer = tfrecord_package.TFRecordWriter(str(folder / "train.tfrecord"))
    for i in range(5):
        writer.write({"label": (i % 2, "int"), "blob": (bytes([i]) * 3, "byte")})
    writer.close()
    return ["--input", str(folder / "train.tfrecord")], 5


PIPELINES = {
    "demo": (demo, lambda folder: (["--num_examples", "12", "--image_size", "16"], 12)),
    "image_folder": (image_folder, _image_folder_input),
    "jsonl": (jsonl, _jsonl_input),
    "csv": (csv_pipeline, _csv_input),
    "parquet": (parquet, _parquet_input),
    "tfrecord": (tfrecord, _tfrecord_input),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["s3"], indirect=True)
@pytest.mark.parametrize("name", PIPELINES)
def test_each_conversion_pipeline_writes_to_s3(store, name, tmp_path):
    module, make_input = PIPELINES[name]
    flags, expected_rows = make_input(tmp_path)
    path = store.uri(name)
    manifest = module.run([*flags, "--output", path, "--runner=FnApiRunner"])
    assert manifest.num_rows == expected_rows
    assert read_metadata(path).write_id == manifest.write_id and len(ShardedDataset(path)) == expected_rows
    assert verify(path).ok


# --- a store that cannot be used: an error naming the URI, at once, and nothing published ------

def _break(store, problem: str, monkeypatch) -> str:
    """Breaks the configuration as `problem` says; returns the cache path to try and the reason expected."""
    if problem == "missing credentials":
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        return store.uri("cache"), "no AWS credentials"
    if problem == "missing bucket":
        return f"{store.scheme}://no-such-bucket/cache", "there is no bucket 'no-such-bucket'"
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL" if store.scheme == "s3" else "STORAGE_EMULATOR_HOST", dead)
    return store.uri("cache"), f"cannot reach {'S3' if store.scheme == 's3' else 'GCS'} ({dead})"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store, problem", [
    ("s3", "missing credentials"), ("s3", "missing bucket"), ("s3", "unreachable endpoint"),
    ("gs", "missing bucket"), ("gs", "unreachable endpoint"),
], indirect=["store"])
def test_a_store_that_cannot_be_used_is_named_at_once(store, problem, monkeypatch, capsys):
    """(The GCS emulator serves anonymous clients, so GCS has no credentials to miss here.)"""
    with monkeypatch.context() as broken:
        path, reason = _break(store, problem, broken)
        named = f"{re.escape(reason)}.* for {re.escape(path)}/"
        with pytest.raises(StoreAccessError, match=named):
            write_shards(rows(0, 10), path, SMALL)
        with pytest.raises(StoreAccessError, match=named + "_metadata.json"):
            ArrowBackend.open(path)
        with pytest.raises(Exception, match=named):
            with beam.Pipeline(options=options()) as p:
                _ = p | beam.Create(rows(0, 10)) | WriteToArrowShards(path, SMALL)
        assert cli.main(["info", path]) == 1
        assert f"beam-shards: {reason}" in capsys.readouterr().err
    if problem != "missing bucket":
        assert not folders.list_dir(path, recursive=True), "something was written"


# --- the versioned commit's guarantees on the store ------------------------------------------

def leftovers(path: str) -> list[str]:
    """Objects under `path` that no kept version needs (its manifest, its shards) besides `_metadata.json`."""
    keep = {MANIFEST_NAME}
    for manifest in list_versions(path):
        keep |= {shard.file for shard in manifest.shards} | {f"{VERSIONS_DIR}/{version_name(manifest.version)}"}
        keep |= {f"{TABLES_DIR}/{ref.file}" for ref in manifest.shards.refs if manifest.has_tables}
    return sorted(set(folders.walk(path)) - keep)


def versions_hold(path: str) -> list[str]:
    """Which write (A, B or C of `VERSIONS`) each kept version holds, oldest first; each must hold it whole."""
    held = []
    for manifest in list_versions(path):
        table = ArrowBackend.open(path, version=manifest.version)
        table = table.slice(0, table.num_rows)
        (name,) = set(table.column("version").to_pylist())
        assert sorted(table.column("id").to_pylist()) == list(VERSIONS[name]), f"version {manifest.version} lost rows"
        held.append(name)
    return held


@pytest.mark.timeout(600)
def test_two_racing_writers_end_as_two_versions(store, monkeypatch):
    """Both writers read version 1 as the latest and try to create version 2 at the same moment."""
    path = store.uri("cache")
    write_version(path, "A")
    barrier = threading.Barrier(2, timeout=300)
    first_try, created = set(), []
    real = fs.create_if_absent

    def contested(target: str, data: bytes, temp: str) -> bool:
        if f"/{VERSIONS_DIR}/" not in target:  # a shard table: named by its content, never contested
            return real(target, data, temp)
        if threading.current_thread().name not in first_try:
            first_try.add(threading.current_thread().name)
            barrier.wait()
        created.append((target.rsplit("/", 1)[-1], real(target, data, temp)))
        return created[-1][1]

    monkeypatch.setattr(fs, "create_if_absent", contested)
    errors = []

    def write(name: str) -> None:
        try:
            write_version(path, name)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(name,), name=name) for name in "BC"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(500)
    assert not errors, errors
    two, three = version_name(2), version_name(3)
    assert sorted(created) == [(two, False), (two, True), (three, True)], "the race for version 2 was not contested"
    held = versions_hold(path)
    assert held[0] == "A" and sorted(held[1:]) == ["B", "C"] and read_metadata(path).version == 3
    assert not leftovers(path)


def _crash_writer(path: str, version: str, kill: str) -> subprocess.CompletedProcess:
    command = [sys.executable, os.path.join(SCRIPTS, "crash_writer.py"), "local", path, "--version", version,
               "--first", str(VERSIONS[version].start), "--count", str(len(VERSIONS[version])), "--kill", kill]
    return subprocess.run(command, capture_output=True, text=True, timeout=400)


@pytest.mark.timeout(900)
# Each kill point on one store, each store killed at least once: the steps before each point are the same
# calls on both stores (the racing-writer tests contest the conditional create on each).
@pytest.mark.parametrize("store, kill, committed", [
    ("gs", "version:1", False), ("s3", "version:2", False), ("gs", "manifest:1", True),
], indirect=["store"])
def test_sigkill_during_finalize_then_a_rerun(store, kill, committed):
    """Killed with the shards in place but nothing committed, or committed but `_metadata.json` not yet moved.
    The killed writer is a process of its own; the rerun, a plain write after it, runs in this one."""
    path = store.uri("cache")
    write_version(path, "A")
    killed = _crash_writer(path, "B", kill)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    phases = [line.split()[1] for line in killed.stdout.splitlines() if line.startswith("event ")]
    assert "finalize" in phases and "done" not in killed.stdout, f"not killed during finalize: {killed.stdout}"
    assert versions_hold(path) == (["A", "B"] if committed else ["A"])
    assert read_pointer(path).version == 1, "the pointer moved before the kill"
    assert read_metadata(path).version == (2 if committed else 1), "the newest committed version is the latest"
    clean_up(path)  # what `beam-shards gc PATH --min_age 0` does: the pointer catches up, leftovers go
    assert read_metadata(path).version == (2 if committed else 1) and not leftovers(path)
    write_version(path, "C")
    assert versions_hold(path) == (["A", "B", "C"] if committed else ["A", "C"])
    assert read_metadata(path).version == len(list_versions(path)) and not leftovers(path)


# --- the races of issue 24's hostile review, on the store ------------------------------------------

@pytest.mark.timeout(300)
def test_a_finalize_running_twice_at_once_publishes_its_append_once(store, monkeypatch):
    """The twin looks for its write just before the first finalize commits (forced), then reads that
    commit as the latest; no lock serializes them on a store."""
    path = store.uri("cache")
    write_shards(rows(0, 10), path, SMALL)
    write_id = new_write_id()
    staged = stage(path, write_id, rows(100, 20), SMALL)

    def publish():
        return commit.publish(path, write_id=write_id, features=SMALL, staged=staged, options=WriterOptions(),
                              metadata={}, mode="append")

    before = commit.resolve(path)  # what the twin finds when it looks just before the first commits
    first = publish()
    real, looks = commit.resolve, []
    monkeypatch.setattr(commit, "resolve", lambda *args, **kwargs: looks.append(args) or (
        before if len(looks) == 1 else real(*args, **kwargs)))
    second = publish()
    assert len(looks) >= 2, "the early look was forced"
    assert second.version == first.version == 2 and [m.version for m in list_versions(path)] == [1, 2]
    assert all_ids(path) == list(range(10)) + list(range(100, 120))


@pytest.mark.timeout(300)
def test_a_late_pointer_update_never_moves_the_latest_back(store):
    """A commits version 2, its pointer update is slow; B commits 3 and returns; A's update lands."""
    path = store.uri("cache")
    write_shards(rows(0, 5), path, SMALL)
    late = write_shards(rows(10, 5), path, SMALL)
    write_shards(rows(20, 5), path, SMALL)
    fs.write_bytes(fs.join(path, MANIFEST_NAME), late.to_json())  # A's late write of the pointer lands
    assert read_pointer(path).version == 2, "the late update landed"
    assert read_metadata(path).version == 3 and all_ids(path) == list(range(20, 25))
    assert write_shards(rows(30, 5), path, SMALL, mode="append").version == 4
    assert all_ids(path) == list(range(20, 25)) + list(range(30, 35)) and read_pointer(path).version == 4
