"""SIGKILL a writer anywhere: the cache is the old version or the new one, whole, or none.

A writer (`write_shards`, or a Beam pipeline on FnApiRunner) runs in a forked
subprocess (`scripts/crash_writer.py`) and is killed with SIGKILL, either at a seeded
random moment after it starts staging, or by itself at a chosen step: opening the
Nth staged shard, entering finalize, moving the Nth shard into place, creating the
version file (the commit), writing or renaming `_metadata.json`, cleaning up,
removing the Nth file. Half of the trials write over a published cache. After every
kill:

- what a reader sees is the previous cache or the new one, complete (every id once,
  one version only) and `verify` passes; with no previous cache, possibly nothing;
- `beam-shards gc --min_age 0` removes every leftover and nothing a reader needs
  (a version committed just before the kill becomes the latest: gc brings
  `_metadata.json` up to it);
- a re-run publishes a complete new version and leaves nothing else behind. gc leaves a
  clean cache (checked after every kill), so a re-run is tried once from each state a kill
  left: the phase it hit, with or without a previous cache, and the version gc kept.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from beam_shards import ArrowBackend, CacheNotFoundError, read_metadata, verify
from beam_shards.format.layout import STAGING_DIR

from _reliability import VERSIONS, WriterServer, assert_clean_cache, leftovers, write_version, writer_job
from _support import clean_up

RANDOM_TRIALS = 12  # 3 of each: staging or finalize, with or without a previous cache


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with WriterServer(str(tmp_path_factory.mktemp("crash") / "writer.log")) as running:
        yield running


def _visible(path: str) -> tuple[str | None, list[int]]:
    """The version a reader sees at `path` and its ids; (None, []) when there is no cache."""
    try:
        backend = ArrowBackend.open(path)
    except CacheNotFoundError:
        return None, []
    report = verify(path)
    assert report.ok, report.problems
    table = backend.slice(0, backend.num_rows)
    versions = set(table.column("version").to_pylist())
    assert len(versions) == 1, f"a mix of versions {sorted(versions)} is visible"
    return versions.pop(), table.column("id").to_pylist()


def _collect_garbage(path: str) -> None:
    """What `beam-shards gc PATH --min_age 0` does (`test_gc_command_after_a_kill` runs the command itself)."""
    try:
        clean_up(path)
    except CacheNotFoundError:
        assert not leftovers(path), "gc found no cache and no leftovers, yet there are some"


def _trial(server: WriterServer, tally, fault: str, mode: str, path: str, previous: bool, rerun_from: set,
           landed: bool = False, **kill) -> None:
    """One write killed as `kill` says (with `landed`, the kill must have fired), then checked, collected, and
    re-run when the state gc left (phase killed in, previous cache or not, version kept) is not in `rerun_from` yet."""
    if previous:
        write_version(path, "A")
    outcome = server.run(writer_job(mode, path, "B", **kill))
    assert outcome.exit in (("killed",) if landed else ("killed", "0")), \
        f"{kill}: the writer {'was not killed' if outcome.exit == '0' else 'failed'} ({outcome}); {server.log_tail()}"
    version, ids = _visible(path)
    allowed = {"A", "B"} if previous else {None, "B"}
    assert version in allowed, f"{kill} in phase {outcome.phase}: {version!r} visible, expected one of {allowed}"
    if outcome.exit == "0":
        assert version == "B", "a writer that finished must have published"
    expected = VERSIONS[version] if version else []
    tally.record(fault, expected if previous or version else [], ids, detail=outcome.phase)

    _collect_garbage(path)
    assert not leftovers(path), f"gc left {leftovers(path)} after a kill in phase {outcome.phase}"
    assert not os.path.exists(os.path.join(path, STAGING_DIR))
    after = _visible(path)
    if after != (version, ids):  # killed between its commit and `_metadata.json`: gc brings the pointer up
        assert after[0] == "B" and sorted(after[1]) == list(VERSIONS["B"]), f"gc changed the cache to {after[0]}"
        tally.counts[fault].detail["committed, pointer caught up by gc"] += 1
    state = (outcome.phase, previous, after[0])
    if state in rerun_from:
        return
    rerun_from.add(state)

    rerun = server.run(writer_job(mode, path, "C"))
    assert rerun.exit == "0", f"the re-run failed after {kill} ({rerun}); {server.log_tail()}"
    version, ids = _visible(path)
    assert version == "C"
    tally.record(f"re-run after crash ({mode})", VERSIONS["C"], ids)
    assert_clean_cache(path)


@pytest.fixture(scope="module")
def calibrated(server, tmp_path_factory):
    """`_calibrate` for a mode, once per module."""
    found = {}

    def calibrate(mode: str) -> tuple[int, int, float, float]:
        if mode not in found:
            found[mode] = _calibrate(server, tmp_path_factory.mktemp(f"calibrate_{mode}"), mode)
        return found[mode]

    return calibrate


def _calibrate(server: WriterServer, tmp_path, mode: str) -> tuple[int, int, float, float]:
    """The shard counts of the previous and the new version, and from unkilled writes on fresh
    paths (the shortest finalize) the median seconds from the start of staging to finalize and to the end."""
    previous = str(tmp_path / "calibrate_previous")
    write_version(previous, "A")
    to_finalize, to_done = [], []
    for n in range(3):
        path = str(tmp_path / f"calibrate_{mode}_{n}")
        outcome = server.run(writer_job(mode, path, "B"))
        assert outcome.exit == "0", server.log_tail()
        to_finalize.append(outcome.events["finalize"] - outcome.events["staging"])
        to_done.append(outcome.events["done"] - outcome.events["staging"])
    return (read_metadata(path).num_shards, read_metadata(previous).num_shards, sorted(to_finalize)[1],
            sorted(to_done)[1])


def _step_kills(shards: int, mode: str) -> list[tuple[str, bool]]:
    """(kill point, whether to write over a previous cache) for each step trial.

    A Beam write stages in bundles of its own, then calls the finalize a local write calls: it is killed at
    every staging step and at each later kill point once; a local write at each point with and without a
    previous cache.
    """
    middle = shards // 2
    if mode == "beam":
        return [
            ("create:1", False), ("create:2", True), (f"create:{middle}", False), (f"create:{shards}", True),
            ("publish:1", True), ("rename:1", False), (f"rename:{shards + 1}", True), ("commit:2", False),
            ("version:1", True), ("manifest:1", True), ("cleanup:1", False), ("unlink:2", True),
        ]
    # Files created after the shards: the shard table, the version's header, then `_metadata.json`.
    table_file, version_file, pointer_file = shards + 1, shards + 2, shards + 3
    return [
        ("create:1", False), ("create:2", True), (f"create:{middle}", False), (f"create:{shards}", True),
        (f"create:{table_file}", False), (f"create:{table_file}", True),
        (f"create:{version_file}", False), (f"create:{version_file}", True), (f"create:{pointer_file}", True),
        ("publish:1", True), ("publish:1", False), ("rename:1", False), ("rename:2", True),
        (f"rename:{middle}", True), (f"rename:{shards}", False), ("commit:1", True), ("commit:1", False),
        ("commit:2", True), ("commit:2", False), ("version:1", True), ("version:2", False),
        (f"rename:{shards + 1}", True), (f"rename:{shards + 1}", False), ("manifest:1", True),
        ("manifest:1", False), ("cleanup:1", True), ("cleanup:1", False), ("unlink:1", True), ("unlink:2", False),
        ("unlink:2", True),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["local", "beam"])
def test_kill_at_each_step(server, tally, calibrated, tmp_path, mode):
    shards, previous_shards, _, _ = calibrated(mode)
    assert shards >= 8 and previous_shards >= 4, "small shards make every step a loop"
    fault = f"crash {mode}, killed at a step"
    steps, rerun_from = _step_kills(shards, mode), set()
    for n, (kill, previous) in enumerate(steps):
        _trial(server, tally, fault, mode, str(tmp_path / f"step{n}"), previous, rerun_from, landed=True, kill=kill)
    assert tally.counts[fault].trials == len(steps) >= 12
    assert {phase for phase, _, _ in rerun_from} == {"staging", "finalize", "manifest", "cleanup"}, rerun_from
    tally.assert_no_loss()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["local", "beam"])
def test_kill_at_random_moments(server, tally, calibrated, tmp_path, mode):
    _, _, finalize, done = calibrated(mode)
    fault = f"crash {mode}, killed at a random moment"
    rng, rerun_from = random.Random(f"crash-{mode}-1"), set()
    for n in range(RANDOM_TRIALS):
        # Staging takes most of a write: aim every other kill at finalize, the manifest and clean-up.
        kill = ({"kill_phase": "staging", "kill_after": rng.uniform(0, finalize)} if n % 2 else
                {"kill_phase": "finalize", "kill_after": rng.uniform(0, done - finalize)})
        _trial(server, tally, fault, mode, str(tmp_path / f"random{n}"), previous=n % 4 < 2, rerun_from=rerun_from,
               **kill)
    assert tally.counts[fault].trials == RANDOM_TRIALS
    tally.assert_no_loss()


def test_gc_command_after_a_kill(server, tmp_path):
    """`beam-shards gc` itself: a dry run lists and keeps the leftovers, a real run removes only them."""
    path = str(tmp_path / "cache")
    write_version(path, "A")
    outcome = server.run(writer_job("local", path, "B", kill="rename:3"))
    assert outcome.exit == "killed"
    left = leftovers(path)
    assert len(left) == 3, left  # the staging folder and the two shards already moved
    command = [os.path.join(os.path.dirname(sys.executable), "beam-shards"), "gc", path, "--min_age", "0"]
    dry = subprocess.run(command + ["--dry-run"], capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert leftovers(path) == left
    assert all(name in dry.stdout for name in left if name.endswith(".arrow")), dry.stdout
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not leftovers(path)
    assert _visible(path) == ("A", list(VERSIONS["A"]))
