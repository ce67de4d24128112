"""Two writers at once to one path, and readers polling all along: two whole versions, one after the other.

Each round starts two writers at the same moment over a published version A, from
two processes (`scripts/crash_writer.py --serve`, one each): two `write_shards`, two
Beam pipelines, or one of each. Their commits race for version 2: one wins it, the
other publishes version 3. Meanwhile a reader thread opens and reads the latest
version in a loop; every read must see one complete write, and none may fail (no
retention runs during the round). After the round versions 1 to 3 are each whole.
"""

from __future__ import annotations

import threading

import pytest

from beam_shards import ArrowBackend, list_versions, verify

from _reliability import VERSIONS, WriterServer, assert_clean_cache, leftovers, write_version, writer_job
from _support import clean_up

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
        backend = ArrowBackend.open(self.path)
        table = backend.slice(0, backend.num_rows)
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
    by_write = dict(zip([o.done for o in outcomes], "BC"))
    versions = list_versions(path)
    assert [m.version for m in versions] == [1, 2, 3], "the two writes must end as two successive versions"
    assert {m.write_id for m in versions[1:]} == set(by_write)
    for manifest in versions[1:]:
        backend = ArrowBackend.open(path, version=manifest.version)
        ids = backend.slice(0, manifest.num_rows).column("id").to_pylist()
        tally.record(f"two concurrent writers ({kind})", VERSIONS[by_write[manifest.write_id]], ids)
        assert verify(path, version=manifest.version).ok
    assert not leftovers(path), "each write removes its own staging"
    clean_up(path)
    assert_clean_cache(path)
    return reader


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(ROUNDS))
def test_two_writers_at_once(servers, tally, tmp_path, kind):
    modes = {"local": ("local", "local"), "beam": ("beam", "beam"), "mixed": ("local", "beam")}[kind]
    reads = 0
    for n in range(ROUNDS[kind]):
        reads += sum(_round(servers, tally, str(tmp_path / f"round{n}"), modes).seen.values())
    assert reads > 0, "the reader must have read while the writers ran"
    assert tally.counts[f"two concurrent writers ({kind})"].trials == 2 * ROUNDS[kind]
    tally.assert_no_loss()
