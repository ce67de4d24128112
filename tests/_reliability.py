"""Helpers of the reliability tests: what a cache holds, what is left over, and a tally.

The tally counts, per fault class, the trials run and the trials that lost or
duplicated data; the `tally` fixture (tests/robustness/conftest.py) prints it when its
module finishes (also under pytest's output capture), so a CI log carries the figures.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable

import pytest

from beam_shards import ArrowBackend, list_versions, write_shards
from beam_shards.format.version_files import read_table
from beam_shards.format.layout import LOCK_NAME, MANIFEST_NAME, STAGING_DIR, TABLES_DIR, VERSIONS_DIR, version_name
from beam_shards.format.manifest import Manifest

from _paths import SCRIPTS

sys.path.insert(0, SCRIPTS)
import crash_writer  # noqa: E402

# The versions the crash and concurrency tests write: ids are disjoint, so a mix shows.
VERSIONS = {"A": range(0, 300), "B": range(1000, 1600), "C": range(5000, 5450)}
SHARD_SIZE = 6_000


def writer_job(mode: str, path: str, version: str, **kill) -> dict:
    """A job for `WriterServer`: write `version` at `path` with `mode` ("local" or "beam")."""
    ids = VERSIONS[version]
    return {"mode": mode, "path": path, "version": version, "first": ids.start, "count": len(ids),
            "shard_size": SHARD_SIZE, **kill}


def write_version(path: str, version: str) -> None:
    """Publishes `version` at `path` with `write_shards`, in this process."""
    examples = (crash_writer.example(i, version) for i in VERSIONS[version])
    write_shards(examples, path, crash_writer.FEATURES, shard_size_bytes=SHARD_SIZE, batch_size=8)


def ids_of(path: str) -> list[int]:
    """The `id` column of the published cache at `path`, in cache order."""
    backend = ArrowBackend.open(path)
    return backend.slice(0, backend.num_rows).column("id").to_pylist()


def staged_files(path: str) -> list[str]:
    """Every file under `<path>/_staging`, relative to `path`."""
    found = []
    for root, _, names in os.walk(os.path.join(path, STAGING_DIR)):
        found.extend(os.path.relpath(os.path.join(root, name), path) for name in names)
    return sorted(found)


def leftovers(path: str) -> list[str]:
    """What in `path` belongs to no kept version: not a manifest, a shard a version lists, or the lock."""
    if not os.path.isdir(path):
        return []
    keep = {MANIFEST_NAME, LOCK_NAME}
    if os.path.exists(os.path.join(path, MANIFEST_NAME)):
        versions = list_versions(path)
        keep |= {shard.file for manifest in versions for shard in manifest.shards}
        keep |= {f"{VERSIONS_DIR}/{version_name(manifest.version)}" for manifest in versions}
        keep |= {f"{TABLES_DIR}/{ref.file}" for manifest in versions if manifest.has_tables
                 for ref in manifest.shards.refs}
    found = {name for name in os.listdir(path) if name not in (VERSIONS_DIR, TABLES_DIR)}
    for folder in (VERSIONS_DIR, TABLES_DIR):
        if os.path.isdir(os.path.join(path, folder)):
            found |= {f"{folder}/{name}" for name in os.listdir(os.path.join(path, folder))}
    return sorted(found - keep)


def listed_manifest(path: str, where: str | None = None) -> dict:
    """The JSON data of the manifest at `where` (`_metadata.json` by default) of the cache at `path`,
    in format 2: every shard listed, so that a test can edit the list (format 2 is still read)."""
    where = where or os.path.join(path, MANIFEST_NAME)
    with open(where, "rb") as handle:
        raw = handle.read()
    data = json.loads(raw)
    if "tables" in data:
        data = Manifest.from_json(raw, path, where, functools.partial(read_table, path)).to_dict(2)
    return data


def edit_manifest(path: str, edit: Callable[[dict], None]) -> None:
    """Rewrites the manifest at `path` after `edit` changed its JSON data (format 2) in place."""
    where = os.path.join(path, MANIFEST_NAME)
    data = listed_manifest(path)
    edit(data)
    with open(where, "w") as handle:
        json.dump(data, handle)


def assert_clean_cache(path: str) -> None:
    """Asserts that `path` holds a published cache and nothing else (no staging, no stale shards)."""
    assert os.path.exists(os.path.join(path, MANIFEST_NAME)), f"no manifest in {path}: {os.listdir(path)}"
    assert not leftovers(path), f"left over in {path}: {leftovers(path)}"


@dataclasses.dataclass
class Count:
    trials: int = 0
    lost: int = 0
    duplicated: int = 0
    detail: collections.Counter = dataclasses.field(default_factory=collections.Counter)


class Tally:
    """Trials per fault class, and how many of them lost or duplicated data."""

    def __init__(self):
        self.counts: dict[str, Count] = collections.defaultdict(Count)

    def record(self, fault: str, expected: Iterable[int], seen: Iterable[int], detail: str | None = None) -> None:
        """Counts one trial: `seen` ids against `expected`; a loss or a duplicate is counted, not raised."""
        expected_counts = collections.Counter(expected)
        seen_counts = collections.Counter(seen)
        count = self.counts[fault]
        count.trials += 1
        count.lost += bool(expected_counts - seen_counts)
        count.duplicated += any(n > 1 for n in seen_counts.values()) or bool(seen_counts - expected_counts)
        if detail is not None:
            count.detail[detail] += 1

    def lines(self) -> list[str]:
        lines = []
        for fault, count in sorted(self.counts.items()):
            detail = f" ({', '.join(f'{k}: {v}' for k, v in sorted(count.detail.items()))})" if count.detail else ""
            lines.append(f"RELIABILITY {fault}: {count.trials} trials, {count.lost} lost data, "
                         f"{count.duplicated} duplicated data{detail}")
        return lines

    def assert_no_loss(self) -> None:
        bad = {f: c for f, c in self.counts.items() if c.lost or c.duplicated}
        assert not bad, "\n".join(self.lines())


def print_uncaptured(request: pytest.FixtureRequest, lines: list[str]) -> None:
    """Prints `lines` to the terminal even while pytest captures output."""
    if not lines:
        return
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        sys.stdout.write("\n" + "\n".join(lines) + "\n")
        sys.stdout.flush()


class WriterServer:
    """`scripts/crash_writer.py --serve` in a subprocess: forks one writer per job, cheaply.

    Example:
        >>> with WriterServer(log) as server:  # doctest: +SKIP
        ...     outcome = server.run({"mode": "local", "path": p, "version": "B", "first": 0, "count": 600})
    """

    def __init__(self, log_path: str, timeout: float = 300):
        self._log_path = log_path
        self._timeout = timeout
        self._log = open(log_path, "ab")
        self._process = subprocess.Popen([sys.executable, os.path.join(SCRIPTS, "crash_writer.py"), "--serve"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                         text=True, bufsize=1)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        assert self._next_line() == "ready", self.log_tail()

    def __repr__(self) -> str:
        return f"WriterServer(pid={self._process.pid}, log={self._log_path!r})"

    def __enter__(self) -> WriterServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _pump(self) -> None:
        for line in self._process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _next_line(self) -> str:
        try:
            line = self._lines.get(timeout=self._timeout)
        except queue.Empty:
            raise AssertionError(f"crash_writer gave no answer within {self._timeout}s; {self.log_tail()}") from None
        if line is None:
            raise AssertionError(f"crash_writer server exited; {self.log_tail()}")
        return line

    def start(self, job: dict) -> None:
        """Sends a job; `finish` collects its outcome."""
        self._process.stdin.write(json.dumps(job) + "\n")
        self._process.stdin.flush()

    def finish(self) -> Outcome:
        """Waits for the job sent last to end; its exit, phases entered (with seconds) and write id."""
        events, done = {}, None
        while True:
            words = self._next_line().split()
            if words[0] == "exit":
                return Outcome(" ".join(words[1:]), events, done)
            if words[0] == "event":
                events[words[1]] = float(words[2])
            elif words[0] == "done":
                done = words[1]
                events["done"] = float(words[2])

    def run(self, job: dict) -> Outcome:
        self.start(job)
        return self.finish()

    def log_tail(self, chars: int = 3000) -> str:
        self._log.flush()
        with open(self._log_path, "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
        return "writer log: ..." + text[-chars:]

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.stdin.close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._log.close()


@dataclasses.dataclass
class Outcome:
    """How a forked writer ended.

    Attributes:
      exit: "0", "1" or "killed".
      events: phase -> seconds after the writer started, in the order entered ("done" last).
      done: the write id it published, None if it did not finish.
    """

    exit: str
    events: dict[str, float]
    done: str | None

    @property
    def phase(self) -> str:
        """Where the writer was when it ended: the last phase it entered, or "finished"."""
        if self.done is not None:
            return "finished"
        return list(self.events)[-1] if self.events else "starting"
