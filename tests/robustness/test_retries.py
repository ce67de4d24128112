"""Retries and repeats: finalize twice or after a partial run, bundles repeated or retried.

Each scenario must publish every example exactly once and leave no staging file and
no stale shard behind. Interrupted finalizes are simulated in-process by raising a
`Crash` (a BaseException, which nothing in beam_shards or Beam's file systems
catches) at the chosen step, leaving the files as a killed process would.
"""

from __future__ import annotations

import os
import uuid

import apache_beam as beam
import pytest

from beam_shards import Features, Value, WriterOptions, WriteToArrowShards, read_metadata, verify, write_shards
from beam_shards.beam import publishing
from beam_shards.beam.bundles import WriteBundleFn
from beam_shards.beam.staging import BundleWriter
from beam_shards.beam.sink import _FinalizeFn
from beam_shards.format.layout import new_write_id
from beam_shards.storage import fs
from beam_shards.versions import commit

from _reliability import assert_clean_cache, ids_of, leftovers, staged_files
from _support import clean_up, options

FEATURES = Features({"id": Value("int64"), "text": Value("string")})
WRITER_OPTIONS = {"shard_size_bytes": 2_000, "batch_size": 10}
OPTIONS = WriterOptions(**WRITER_OPTIONS)
PREVIOUS = range(10_000, 10_100)


class Crash(BaseException):
    """Stands for the process dying at this point."""


def _row(i: int) -> dict:
    return {"id": i, "text": f"row {i} " * 5}


def _write_previous(path: str) -> None:
    write_shards((_row(i) for i in PREVIOUS), path, FEATURES, **WRITER_OPTIONS)


def _stage(path: str, write_id: str, bundles: list[range]) -> list:
    """Stages `bundles` as the sink's bundles do, returning their shard results."""
    staged = []
    write = WriteBundleFn(path, FEATURES, OPTIONS, write_id)
    write.setup()
    for bundle in bundles:
        write.start_bundle()
        for i in bundle:
            write.process(_row(i))
        staged.extend(value.value for value in write.finish_bundle())
    return staged


def _finalize(path: str, write_id: str, staged: list):
    [manifest] = list(_FinalizeFn(path, FEATURES, OPTIONS, {}, "overwrite", None, True).process(None, write_id, staged))
    return manifest


def _crash_on_call(monkeypatch, owner, name: str, n: int) -> None:
    """Makes the `n`th call of `owner.name` raise Crash instead of running."""
    original = getattr(owner, name)
    calls = []

    def wrapper(*args, **kwargs):
        calls.append(args)
        if len(calls) == n:
            raise Crash(f"{name} call {n}")
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)


def _check(tally, fault: str, path: str, expected) -> None:
    ids = ids_of(path)
    tally.record(fault, expected, ids)
    assert sorted(ids) == sorted(expected)
    assert verify(path).ok
    assert_clean_cache(path)


@pytest.mark.parametrize("with_previous", [False, True])
def test_finalize_twice(tally, tmp_path, with_previous):
    path = str(tmp_path / "cache")
    if with_previous:
        _write_previous(path)
    write_id = new_write_id()
    staged = _stage(path, write_id, [range(0, 60), range(60, 150)])
    first = _finalize(path, write_id, staged)
    second = _finalize(path, write_id, staged)
    assert second.write_id == first.write_id and second.shards == first.shards
    assert read_metadata(path).created == first.created, "a second finalize must not rewrite the manifest"
    _check(tally, "finalize run twice", path, range(150))


def _steps(shards: int) -> list[tuple[str, str, int]]:
    """(where, function, call) to crash at: moving shards, committing the version, writing `_metadata.json`,
    cleaning up."""
    return [("os", "rename", 1), ("os", "rename", 2), ("os", "rename", shards // 2), ("os", "rename", shards),
            ("fs", "create_if_absent", 1), ("os", "link", 1), ("fs", "write_bytes_atomic", 1),
            ("os", "rename", shards + 1), ("commit", "remove_staging", 1), ("fs", "delete", 1)]


@pytest.mark.parametrize("with_previous", [False, True])
@pytest.mark.parametrize("step", range(len(_steps(8))))
def test_finalize_interrupted_then_run_again(tally, tmp_path, monkeypatch, with_previous, step):
    path = str(tmp_path / "cache")
    if with_previous:
        _write_previous(path)
    write_id = new_write_id()
    staged = _stage(path, write_id, [range(0, 70), range(70, 160)])
    assert len(staged) >= 8
    where, name, n = _steps(len(staged))[step]
    with monkeypatch.context() as patch:
        _crash_on_call(patch, {"os": os, "fs": fs, "commit": commit}[where], name, n)
        with pytest.raises(Crash):
            _finalize(path, write_id, staged)
    published = commit.find_published(path, write_id) is not None
    if not published:
        if with_previous:
            assert sorted(ids_of(path)) == list(PREVIOUS), "an interrupted finalize must keep the previous cache"
            assert verify(path).ok
        else:
            assert not os.path.exists(os.path.join(path, "_metadata.json"))
    _finalize(path, write_id, staged)
    _check(tally, "finalize interrupted, then run again", path, range(160))


def test_finalize_fails_clearly_when_a_staged_shard_is_gone(tmp_path):
    path = str(tmp_path / "cache")
    write_id = new_write_id()
    staged = _stage(path, write_id, [range(0, 50)])
    os.remove(staged[1][1].path)
    with pytest.raises(commit.PublishError, match=r"staged shard .*part-00001\.arrow \(\d+ rows\) is gone"):
        _finalize(path, write_id, staged)
    assert not os.path.exists(os.path.join(path, "_metadata.json"))


def _examples(part: int):
    for i in range(part * 100, (part + 1) * 100):
        yield _row(i)


def _run_sink(path: str, *args: str, transform=None) -> None:
    with beam.Pipeline(options=options(*args)) as p:
        examples = p | beam.Create(range(6)) | beam.FlatMap(_examples) | beam.Reshuffle()
        if transform is not None:
            examples = examples | transform
        examples | WriteToArrowShards(path, FEATURES, **WRITER_OPTIONS)


def test_finalize_twice_inside_the_sink(tally, tmp_path, monkeypatch):
    path = str(tmp_path / "cache")
    _write_previous(path)
    manifests = []

    def publish_twice(*args, **kwargs):
        manifests.append(commit.publish(*args, **kwargs))
        manifests.append(commit.publish(*args, **kwargs))
        return manifests[-1]

    monkeypatch.setattr(publishing, "publish", publish_twice)
    _run_sink(path)
    assert len(manifests) == 2 and manifests[0].shards == manifests[1].shards
    _check(tally, "finalize run twice", path, range(600))


def test_bundle_repeat_over_a_previous_cache(tally, tmp_path):
    path = str(tmp_path / "cache")
    _write_previous(path)
    previous_id = read_metadata(path).write_id
    _run_sink(path, "--direct_runner_bundle_repeat=1")
    manifest = read_metadata(path)
    assert manifest.parent_version == read_metadata(path, version=1).version == 1
    assert read_metadata(path, version=1).write_id == previous_id
    assert all(manifest.write_id in shard.file for shard in manifest.shards)
    _check(tally, "bundle output produced twice (bundle repeat)", path, range(600))


class _FailingCreate:
    """Replaces `fs.create`: the `fail_at`th file a first attempt opens raises, after earlier ones were staged.

    A marker file per failure records that it fired, so the retried attempt succeeds.
    """

    def __init__(self, markers: str, fail_at: int, failures: int = 1):
        self._markers = markers
        self._fail_at = fail_at
        self._failures = failures
        self._original = fs.create
        self._opened: dict[str, int] = {}

    def __call__(self, path: str):
        attempt = os.path.dirname(path)
        self._opened[attempt] = self._opened.get(attempt, 0) + 1
        fired = len(os.listdir(self._markers))
        if self._opened[attempt] == self._fail_at and fired < self._failures:
            open(os.path.join(self._markers, uuid.uuid4().hex), "w").close()
            raise RuntimeError(f"injected failure opening {path}")
        return self._original(path)


@pytest.mark.parametrize("cleanup", ["discarded", "left behind"])
def test_bundle_fails_after_staging_then_is_retried(tally, tmp_path, monkeypatch, cleanup):
    """BundleBasedDirectRunner retries a failed bundle; only the committed attempt's shards count.

    "left behind" stands for a worker that died before removing its staged files:
    finalize must drop them with the staging folder.
    """
    path = str(tmp_path / "cache")
    markers = tmp_path / "markers"
    markers.mkdir()
    _write_previous(path)
    failing = _FailingCreate(str(markers), fail_at=3, failures=2)
    monkeypatch.setattr(fs, "create", failing)
    if cleanup == "left behind":
        monkeypatch.setattr(BundleWriter, "discard", lambda self: setattr(self, "_writer", None))
    _run_sink(path, "--runner=BundleBasedDirectRunner")
    assert len(os.listdir(markers)) == 2, "both injected failures must have fired"
    assert max(failing._opened.values()) >= 3, "shards must have been staged before the failure"
    _check(tally, f"bundle failed after staging, retried ({cleanup})", path, range(600))


def test_a_failed_retry_publishes_nothing_and_gc_cleans(tmp_path, monkeypatch):
    """A bundle that fails every attempt fails the pipeline: the previous cache stays, no staged file."""
    
    path = str(tmp_path / "cache")
    markers = tmp_path / "markers"
    markers.mkdir()
    _write_previous(path)
    previous_id = read_metadata(path).write_id
    monkeypatch.setattr(fs, "create", _FailingCreate(str(markers), fail_at=2, failures=100))
    with pytest.raises(Exception, match="injected failure opening"):
        _run_sink(path, "--runner=BundleBasedDirectRunner")
    assert read_metadata(path).write_id == previous_id
    assert sorted(ids_of(path)) == list(PREVIOUS)
    assert not staged_files(path), "every failed attempt must remove the files it staged"
    clean_up(path)
    assert not leftovers(path)
