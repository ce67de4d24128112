"""`write_shards`: keys, staging, atomic overwrite, the file lock, failures, empty input, progress."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

import pytest

from beam_shards import (ArrowBackend, CacheError, EncodeError, Features, ShardedDataset, Value, list_versions,
                         read_metadata, verify, write_shards)
from beam_shards.format.layout import LOCK_NAME, MANIFEST_NAME, STAGING_DIR, write_id_of_shard
from beam_shards.progress import Progress
from beam_shards.versions import commit

from _paths import REPO
from _reliability import assert_clean_cache
from _support import FEATURES, example

TAGGED = Features({"i": Value("int64"), "tag": Value("string")})


def tagged(tag: str, n: int):
    return ({"i": i, "tag": tag} for i in range(n))


def rows(path: str) -> list[dict]:
    return ArrowBackend.open(path).slice(0, 1 << 30).to_pylist()


def shard_files(path: str) -> list[str]:
    return sorted(name for name in os.listdir(path) if name.endswith(".arrow"))


def assert_clean(path: str, manifest) -> None:
    """`manifest` is the latest version, and only manifests, the lock and kept versions' shards are left."""
    assert read_metadata(path).version == manifest.version
    assert_clean_cache(path)


def test_plain_dicts_are_written_in_order(tmp_path):
    path = str(tmp_path / "c")
    manifest = write_shards((example(i) for i in range(30)), path, FEATURES, max_rows_per_shard=8)
    assert manifest.num_rows == 30 and [s.num_rows for s in manifest.shards] == [8, 8, 8, 6]
    backend = ArrowBackend.open(path)
    assert backend.take(list(range(30))).column("id").to_pylist() == list(range(30))
    assert backend.get_row(29)["caption"] == "example number 29"
    assert_clean(path, manifest)
    assert {write_id_of_shard(s.file) for s in manifest.shards} == {manifest.write_id}
    assert verify(path).ok


def test_key_dict_pairs_are_written_and_keys_name_errors(tmp_path):
    path = str(tmp_path / "c")
    manifest = write_shards(((f"key-{i}", {"i": i, "tag": "p"}) for i in range(5)), path, TAGGED)
    assert manifest.num_rows == 5 and [r["i"] for r in rows(path)] == list(range(5))
    bad = [("a", {"i": 1, "tag": "x"}), ("photo-2", {"i": "two", "tag": "x"})]
    with pytest.raises(EncodeError) as info:
        write_shards(bad, str(tmp_path / "d"), TAGGED)
    assert info.value.example == "photo-2" and info.value.field == "i" and "'photo-2'" in str(info.value)


def test_errors_in_plain_dicts_name_the_position(tmp_path):
    examples = [{"i": 0, "tag": "a"}, {"i": 1, "tag": "b"}, {"i": 2}]
    with pytest.raises(EncodeError) as info:
        write_shards(examples, str(tmp_path / "c"), TAGGED)
    assert info.value.example == 2 and info.value.field == "tag" and "missing field" in str(info.value)


def test_shards_are_staged_beside_the_target(tmp_path):
    path = str(tmp_path / "c")
    seen = []

    def examples():
        for i in range(40):
            if i == 30:
                (write_id,) = os.listdir(os.path.join(path, STAGING_DIR))
                (attempt,) = os.listdir(os.path.join(path, STAGING_DIR, write_id))
                seen.extend(os.listdir(os.path.join(path, STAGING_DIR, write_id, attempt)))
                seen.append(os.path.exists(os.path.join(path, MANIFEST_NAME)))
            yield {"i": i, "tag": "s"}

    manifest = write_shards(examples(), path, TAGGED, max_rows_per_shard=10)
    assert sorted(seen[:-1]) == ["part-00000.arrow", "part-00001.arrow", "part-00002.arrow"]
    assert seen[-1] is False  # no manifest while staging
    assert not os.path.exists(os.path.join(path, STAGING_DIR))
    assert_clean(path, manifest)


def test_overwrite_keeps_the_old_version_readable_and_kept(tmp_path):
    path = str(tmp_path / "c")
    old = write_shards(tagged("old", 30), path, TAGGED, max_rows_per_shard=10)
    old_files = shard_files(path)
    reader = ArrowBackend.open(path)
    assert reader.get_row(0)["tag"] == "old"  # shard 0 now open in this reader
    during = []

    def examples():
        for i in range(25):
            if i == 20:  # two new shards are staged by now
                during.append((read_metadata(path).write_id, shard_files(path), {r["tag"] for r in rows(path)}))
            yield {"i": i, "tag": "new"}

    new = write_shards(examples(), path, TAGGED, max_rows_per_shard=10)
    assert during == [(old.write_id, old_files, {"old"})]
    assert new.write_id != old.write_id and (new.version, new.parent_version) == (2, 1)
    assert [r["tag"] for r in rows(path)] == ["new"] * 25
    assert set(old_files) < set(shard_files(path)), "the old version stays until retention removes it"
    assert_clean(path, new)
    assert reader.get_row(5)["tag"] == "old" and reader.get_row(25)["tag"] == "old"


def test_two_writers_at_once_publish_two_versions_and_the_lock_guards_the_commit(tmp_path, monkeypatch):
    """Writers stage side by side; each publish holds the lock, so gc and the other commit wait."""
    path = str(tmp_path / "c")
    a_started, a_release = threading.Event(), threading.Event()
    probes = []
    real_commit = commit._commit

    def probing_commit(layout, *args, **kwargs):
        probe = subprocess.run([sys.executable, "-c", _TRY_LOCK, os.path.join(path, LOCK_NAME)],
                               capture_output=True, text=True, check=True)
        probes.append(probe.stdout.strip())
        return real_commit(layout, *args, **kwargs)

    monkeypatch.setattr(commit, "_commit", probing_commit)

    def first():
        yield {"i": 0, "tag": "a"}
        a_started.set()
        assert a_release.wait(60)
        yield {"i": 1, "tag": "a"}

    thread = threading.Thread(target=write_shards, args=(first(), path, TAGGED))
    thread.start()
    assert a_started.wait(60)
    second = write_shards([{"i": 0, "tag": "b"}], path, TAGGED)  # publishes while the first still stages
    a_release.set()
    thread.join(60)
    versions = list_versions(path)
    assert [m.version for m in versions] == [1, 2] and versions[0].write_id == second.write_id
    assert rows(path) == [{"i": 0, "tag": "a"}, {"i": 1, "tag": "a"}]
    assert probes == ["locked", "locked"], "the commit must run under the cache lock"


_TRY_LOCK = """
import sys, filelock
try:
    filelock.FileLock(sys.argv[1]).acquire(timeout=0)
    print("free")
except filelock.Timeout:
    print("locked")
"""

_WRITER = """
import sys
from beam_shards import Features, Value, write_shards
features = Features({"i": Value("int64"), "tag": Value("string")})
write_shards(({"i": i, "tag": sys.argv[2]} for i in range(3000)), sys.argv[1], features, max_rows_per_shard=250,
             batch_size=50)
"""


def test_two_processes_writing_one_path_publish_two_complete_versions(tmp_path):
    path = str(tmp_path / "c")
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, path, tag]) for tag in ("p", "q")]
    assert [proc.wait(120) for proc in procs] == [0, 0]
    assert [m.version for m in list_versions(path)] == [1, 2]
    for version in (1, 2):
        got = ArrowBackend.open(path, version=version).slice(0, 1 << 30).to_pylist()
        assert len({r["tag"] for r in got}) == 1 and [r["i"] for r in got] == list(range(3000))
        assert verify(path, version=version).ok
    assert_clean(path, read_metadata(path))


class Boom(Exception):
    pass


def failing(n: int, staged_seen: list, path: str):
    for i in range(n):
        yield {"i": i, "tag": "failed"}
    staged_seen.extend(os.listdir(os.path.join(path, STAGING_DIR)))
    raise Boom(f"failed after {n} rows")


def test_an_exception_mid_write_publishes_nothing_on_a_fresh_path(tmp_path):
    path = str(tmp_path / "fresh")
    staged = []
    with pytest.raises(Boom):
        write_shards(failing(35, staged, path), path, TAGGED, max_rows_per_shard=10)
    assert len(staged) == 1  # shards were staged before the failure
    assert not os.path.exists(path)


def test_an_exception_mid_write_leaves_the_previous_cache_intact(tmp_path):
    path = str(tmp_path / "c")
    old = write_shards(tagged("old", 20), path, TAGGED, max_rows_per_shard=10)
    before = sorted(os.listdir(path))
    staged = []
    with pytest.raises(Boom):
        write_shards(failing(35, staged, path), path, TAGGED, max_rows_per_shard=10)
    assert staged and sorted(os.listdir(path)) == before
    assert read_metadata(path).write_id == old.write_id
    assert [r["tag"] for r in rows(path)] == ["old"] * 20 and verify(path).ok


def test_a_failing_clean_up_does_not_hide_the_error_that_failed_the_write(tmp_path, monkeypatch, caplog):
    def broken_abandon(path, write_id):
        raise OSError("disk went away")

    monkeypatch.setattr("beam_shards.write.abandon", broken_abandon)
    path = str(tmp_path / "c")
    with pytest.raises(Boom):
        write_shards(failing(15, [], path), path, TAGGED, max_rows_per_shard=10)
    assert "could not remove the files of failed write" in caplog.text and "disk went away" in caplog.text


def test_a_bad_example_mid_write_publishes_nothing(tmp_path):
    path = str(tmp_path / "c")
    old = write_shards(tagged("old", 5), path, TAGGED)
    examples = [{"i": i, "tag": "new"} for i in range(40)] + [{"i": 2 ** 70, "tag": "new"}]
    with pytest.raises(EncodeError) as info:
        write_shards(examples, path, TAGGED, max_rows_per_shard=10)
    assert info.value.example == 40 and info.value.field == "i"
    assert read_metadata(path).write_id == old.write_id
    assert_clean(path, old)


def test_an_interrupt_mid_write_publishes_nothing(tmp_path):
    path = str(tmp_path / "c")

    def interrupted():
        yield from tagged("x", 15)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_shards(interrupted(), path, TAGGED, max_rows_per_shard=10)
    assert not os.path.exists(path)


def test_empty_input_publishes_a_valid_empty_cache(tmp_path):
    path = str(tmp_path / "empty")
    manifest = write_shards(iter([]), path, FEATURES)
    assert manifest.num_rows == 0 and manifest.shards == ()
    assert_clean(path, manifest)
    backend = ArrowBackend.open(path)
    assert backend.num_rows == 0 and backend.num_shards == 0 and list(backend.iter_batches()) == []
    assert backend.take([]).num_rows == 0 and backend.slice(0, 10).num_rows == 0
    assert backend.schema.equals(FEATURES.storage_schema("hf"))
    dataset = ShardedDataset(path)
    assert len(dataset) == 0 and list(dataset) == [] and dataset[:5].__len__() == 0
    with pytest.raises(IndexError, match="index 0 out of range for a dataset of 0 rows"):
        dataset[0]
    assert verify(path).ok


def test_options_compression_and_metadata_are_recorded(tmp_path):
    path = str(tmp_path / "c")
    manifest = write_shards(tagged("z", 50), path, TAGGED, compression="zstd", metadata={"origin": ["a", 1]})
    again = read_metadata(path)
    assert again.compression == "zstd" and again.metadata == {"origin": ["a", 1]} and manifest == again
    assert [r["i"] for r in rows(path)] == list(range(50))


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(metadata={"bad": object()}), ValueError, "JSON-serializable"),
    (dict(metadata=["not", "a", "dict"]), ValueError, "metadata must be a dict"),
    (dict(shard_size_bytes=0), ValueError, "shard_size_bytes"),
    (dict(compression="brotli"), ValueError, "compression"),
    (dict(features={"i": Value("int64")}), TypeError, "Features"),
])
def test_bad_arguments_fail_before_anything_is_created(tmp_path, kwargs, error, match):
    path = str(tmp_path / "c")
    features = kwargs.pop("features", TAGGED)
    with pytest.raises(error, match=match):
        write_shards(tagged("x", 3), path, features, **kwargs)
    assert not os.path.exists(path)


def test_progress_lines_when_enabled(tmp_path, capsys):
    write_shards(tagged("x", 25), str(tmp_path / "on"), TAGGED, progress=True)
    err = capsys.readouterr().err
    assert f"{tmp_path / 'on'}: 25 rows, " in err and "rows/s" in err and "1 shards" in err and "done in" in err
    write_shards(tagged("x", 25), str(tmp_path / "off"), TAGGED, progress=False)
    write_shards(tagged("x", 25), str(tmp_path / "default"), TAGGED)  # stderr is not a terminal here
    assert capsys.readouterr().err == ""


def test_progress_prints_rate_lines_at_its_interval():
    stream = io.StringIO()
    meter = Progress("job", unit="items", enabled=True, interval=0.0, stream=stream)
    meter.update(3)
    meter.update(2, extra=lambda: "2 shards")
    meter.finish(extra="all done")
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("job: 3 items, ") and lines[0].endswith(" items/s")
    assert lines[1].startswith("job: 5 items, ") and lines[1].endswith(", 2 shards")
    assert lines[2].startswith("job: 5 items, ") and ", all done, done in " in lines[2]
    assert meter.count == 5 and "count=5" in repr(meter)
    quiet = io.StringIO()
    meter = Progress("job", stream=quiet)  # not a terminal: off by default
    meter.update()
    meter.finish()
    assert not meter.enabled and quiet.getvalue() == ""
    asked = []
    meter = Progress("job", enabled=True, interval=3600.0, stream=quiet)
    meter.update(1, extra=lambda: asked.append(1) or "")  # no line due: the extra is not asked for
    assert asked == [] and quiet.getvalue() == ""


@pytest.mark.timeout(120)
def test_a_local_write_and_read_import_no_beam(tmp_path):
    """Beam's import costs seconds; a local write_shards and the readers never need it."""
    script = (
        "import sys\n"
        "from beam_shards import ArrowBackend, Features, ShardedDataset, Value, write_shards\n"
        f"path = {str(tmp_path / 'c')!r}\n"
        "features = Features({'i': Value('int64')})\n"
        "write_shards(({'i': i} for i in range(10)), path, features)\n"
        "write_shards(({'i': i} for i in range(5)), path, features, mode='append')\n"
        "assert ArrowBackend.open(path).num_rows == 15 and ShardedDataset(path)[14] == {'i': 4}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'apache_beam'))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100,
                            env={**os.environ, "PYTHONPATH": REPO})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_lock_planted_as_a_link_is_refused_and_its_target_left_whole(tmp_path):
    path = str(tmp_path / "cache")
    features = Features({"x": Value("int64")})
    write_shards(({"x": i} for i in range(3)), path, features)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.remove(os.path.join(path, LOCK_NAME))
    os.symlink(victim, os.path.join(path, LOCK_NAME))
    with pytest.raises(CacheError, match=r"\.lock is a symbolic link, which beam_shards never follows; remove it"):
        write_shards(({"x": i} for i in range(3)), path, features)
    assert victim.read_text() == "precious"
    assert read_metadata(path).version == 1
