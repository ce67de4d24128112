"""fs.open_random_access: a seekable file with ranged reads, on every scheme."""

from __future__ import annotations

import multiprocessing
import os

import pyarrow as pa
import pytest

from beam_shards.storage import fs

import fake_object_store

DATA = bytes(range(256)) * 64


@pytest.fixture
def fake_store(tmp_path, monkeypatch):
    monkeypatch.setenv(fake_object_store.ROOT_ENV, str(tmp_path / "bucket"))
    return "fakeobj://cache"


def _check_ranged_reads(path: str) -> None:
    with fs.open_random_access(path) as handle:
        assert isinstance(handle, pa.NativeFile) and handle.seekable()
        assert handle.size() == len(DATA)
        handle.seek(1000)
        assert handle.read(24) == DATA[1000:1024] and handle.tell() == 1024
        assert handle.read_at(8, len(DATA) - 8) == DATA[-8:]


def test_local_file_is_memory_mapped(tmp_path):
    path = tmp_path / "shard.arrow"
    path.write_bytes(DATA)
    _check_ranged_reads(str(path))
    _check_ranged_reads(f"file://{path}")
    assert fs.is_memory_mapped(fs.open_random_access(str(path)))


def test_other_schemes_read_through_beam(fake_store):
    fs.write_bytes(f"{fake_store}/shard.arrow", DATA)
    _check_ranged_reads(f"{fake_store}/shard.arrow")
    assert not fs.is_memory_mapped(fs.open_random_access(f"{fake_store}/shard.arrow"))


def test_empty_local_file_opens_with_no_bytes(tmp_path):
    path = tmp_path / "empty.arrow"
    path.write_bytes(b"")
    handle = fs.open_random_access(str(path))
    assert handle.size() == 0 and handle.read() == b""


@pytest.mark.parametrize("where", ["local", "fake"])
def test_missing_file_names_the_path(where, tmp_path, fake_store):
    path = str(tmp_path / "nope.arrow") if where == "local" else f"{fake_store}/nope.arrow"
    with pytest.raises(FileNotFoundError, match="nope.arrow"):
        fs.open_random_access(path)


def test_local_path_that_is_not_a_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path, tmp_path / "fifo"):
        with pytest.raises(IsADirectoryError, match=str(path)):
            fs.open_random_access(str(path))


@pytest.mark.timeout(120)
def test_object_stores_serve_ranged_reads(store):
    fs.write_bytes(store.uri("shard.arrow"), DATA)
    _check_ranged_reads(store.uri("shard.arrow"))
    with pytest.raises(FileNotFoundError, match=store.uri("nope.arrow")):
        fs.open_random_access(store.uri("nope.arrow"))


def _read_at(path: str) -> bytes:
    with fs.open_random_access(path) as handle:
        return handle.read_at(24, 1000)


@pytest.mark.timeout(120)
def test_forked_workers_open_their_own_store_clients(store):
    """A DataLoader forks after the parent read: the children must not reuse the parent's connections."""
    fs.write_bytes(store.uri("shard.arrow"), DATA)
    assert _read_at(store.uri("shard.arrow")) == DATA[1000:1024]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map(_read_at, [store.uri("shard.arrow")] * 4) == [DATA[1000:1024]] * 4
