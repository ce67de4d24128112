"""Two writers at once to one path, and readers polling all along: one whole version wins.

Each round starts two writers at the same moment over a published version A, from
two processes (`scripts/crash_writer.py --serve`, one each): two `write_shards`
(serialized by the folder's file lock), two Beam pipelines (no lock: the manifest
rename decides), or one of each. Meanwhile a reader thread opens and reads the whole
cache in a loop. Every read must see one complete version; a read may fail only
because the version it opened was replaced (and its files removed) meanwhile, and
then with a CorruptCacheError. After the round the winner is whole, and `gc` leaves
only its files.
"""

from __future__ import annotations

import threading

import pytest

from _reliability import (VERSIONS, WriterServer, assert_clean_cache, leftovers, tally,  # noqa: F401 (tally is a fixture)
                          write_version, writer_job)
from beam_shards import ArrowBackend, CorruptCacheError, read_metadata, verify
from beam_shards.commit import current_write_id
from beam_shards.gc import collect_garbage, find_garbage

ROUNDS = {"local": 6, "beam": 4, "mixed": 2}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    logs = tmp_path_factory.mktemp("concurrency")
    with WriterServer(str(logs / "first.log")) as first, WriterServer(str(logs / "second.log")) as second:
        yield first, second


class PollingReader(threading.Thread):
    """Opens and reads the whole cache at `path` until stopped; records what each read saw."""

    def __init__(self, path: str, tally, fault: str):
        super().__init__(daemon=True)
        self.path = path
        self.tally = tally
        self.fault = fault
        self.stop = threading.Event()
        self.seen: dict[str, int] = {}
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self._read_once()
        except BaseException as error:  # reported by the test thread
            self.failure = error

    def _read_once(self) -> None:
        before = current_write_id(self.path)
        try:
            backend = ArrowBackend.open(self.path)
            table = backend.slice(0, backend.num_rows)
        except CorruptCacheError as error:
            if current_write_id(self.path) == before:
                raise AssertionError(f"a read failed while version {before} stayed published: {error}") from error
            self.tally.counts[self.fault].detail["reads whose version was replaced meanwhile"] += 1
            return
        versions = set(table.column("version").to_pylist())
        assert len(versions) == 1, f"a mix of versions {sorted(versions)} was read"
        version = versions.pop()
        self.tally.record(self.fault, VERSIONS[version], table.column("id").to_pylist())
        self.seen[version] = self.seen.get(version, 0) + 1


def _round(servers, tally, path: str, modes: tuple[str, str]) -> PollingReader:
    write_version(path, "A")
    kind = "local" if modes == ("local", "local") else "beam" if modes == ("beam", "beam") else "mixed"
    reader = PollingReader(path, tally, f"reads during two concurrent writes ({kind})")
    reader.start()
    try:
        for server, mode, version in zip(servers, modes, "BC"):
            server.start(writer_job(mode, path, version))
        outcomes = [server.finish() for server in servers]
    finally:
        reader.stop.set()
        reader.join()
    if reader.failure is not None:
        raise reader.failure
    assert [o.exit for o in outcomes] == ["0", "0"], [server.log_tail() for server in servers]
    manifest = read_metadata(path)
    winner = dict(zip([o.done for o in outcomes], "BC"))[manifest.write_id]
    ids = ArrowBackend.open(path).slice(0, manifest.num_rows).column("id").to_pylist()
    tally.record(f"two concurrent writers ({kind})", VERSIONS[winner], ids)
    assert verify(path).ok
    if kind == "local":
        loser = next(o.done for o in outcomes if o.done != manifest.write_id)
        assert manifest.previous_write_id == loser, "the lock must serialize the writes: the winner replaced the loser"
        assert not leftovers(path), "with the lock, the winner removes the loser's files itself"
    collect_garbage(find_garbage(path))
    assert_clean_cache(path)
    assert ArrowBackend.open(path).num_rows == len(VERSIONS[winner])
    return reader


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(ROUNDS))
def test_two_writers_at_once(servers, tally, tmp_path, kind):
    modes = {"local": ("local", "local"), "beam": ("beam", "beam"), "mixed": ("local", "beam")}[kind]
    reads = 0
    for n in range(ROUNDS[kind]):
        reads += sum(_round(servers, tally, str(tmp_path / f"round{n}"), modes).seen.values())
    assert reads > 0, "the reader must have read while the writers ran"
    assert tally.counts[f"two concurrent writers ({kind})"].trials == ROUNDS[kind]
    tally.assert_no_loss()
