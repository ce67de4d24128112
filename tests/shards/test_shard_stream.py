"""ShardStream: a shard written, checksummed and synced on its own thread, errors handed back, memory bounded."""

from __future__ import annotations

import io
import os
import threading
import time
import zlib

import pytest
from test_writer import PAYLOAD, blob_rows

from beam_shards import ShardWriter, WriterOptions
from beam_shards.shards.shard_stream import PendingBytes, ShardStream
from beam_shards.storage.checksum import crc32_combine


class Recording(io.BytesIO):
    """Keeps what is written and how many bytes the stream still held queued at each write."""

    def __init__(self, stream_holder: list | None = None, fail_at: int | None = None,
                 gate: threading.Event | None = None):
        super().__init__()
        self.holder, self.fail_at, self.gate = stream_holder if stream_holder is not None else [], fail_at, gate
        self.writes, self.pending_seen, self.closes, self.threads = 0, [], 0, set()
        self.entered = threading.Event()

    def write(self, data) -> int:
        self.threads.add(threading.current_thread().name)
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(30)
        self.writes += 1
        if self.writes == self.fail_at:
            raise OSError(28, "No space left on device (injected)")
        if self.holder:
            self.pending_seen.append(self.holder[0]._pending.count)
        return super().write(data)

    def close(self) -> None:
        self.closes += 1


def _soon(condition, seconds: float = 20) -> bool:
    """Whether `condition()` holds within `seconds` (a deadline against a hang, not a timing)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.mark.timeout(60)
def test_bytes_reach_the_file_in_order_on_another_thread_with_their_checksum():
    holder: list = []
    raw = Recording(holder)
    holder.append(stream := ShardStream(raw))
    chunks = [os.urandom(n) for n in (1, 5000, 70_000, 3)] + [bytearray(b"xyz"), memoryview(b"tail")]
    assert [stream.write(chunk) for chunk in chunks] == [len(bytes(c)) for c in chunks]
    stream.finish()
    whole = b"".join(bytes(c) for c in chunks)
    assert stream.result() == f"crc32:{zlib.crc32(whole):08x}" and stream.size == stream.tell() == len(whole)
    assert raw.getvalue() == whole and raw.closes == 1
    assert raw.threads == {"beam_shards-shard-stream"}


@pytest.mark.timeout(60)
def test_spans_and_the_whole_file_get_the_crcs_of_their_bytes_each_read_once():
    """Spans begin inside a later piece or at its start and end with a piece; the file's CRC takes
    each span's by combining (`crc32_combine`), and both are zlib's over the bytes written."""
    raw = Recording()
    stream = ShardStream(raw)
    expected = []
    for gap, pieces in [(0, [7]), (3, [1, 4096, 5]), (10, [70_000]), (0, [2, 2]), (5000, [1])]:
        start = stream.tell() + gap
        stream.begin_span(start)
        written = [os.urandom(n) for n in ([gap + pieces[0]] if gap else [pieces[0]]) + pieces[1:]]
        for piece in written:
            stream.write(piece)
        stream.end_span()
        expected.append((start, stream.tell() - start))
    stream.write(os.urandom(300))  # the footer: in no span
    stream.finish()
    checksum, whole = stream.result(), raw.getvalue()
    assert checksum == f"crc32:{zlib.crc32(whole):08x}" and len(whole) == stream.size
    assert stream.spans() == tuple((offset, length, zlib.crc32(whole[offset:offset + length]))
                                   for offset, length in expected)


def test_crc32_combine_is_zlibs_crc_of_the_bytes_joined():
    for first, second in [(b"", b""), (b"a", b""), (b"", b"b"), (os.urandom(3), os.urandom(1 << 20)),
                          (os.urandom(1000), os.urandom(12_345))]:
        assert crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second)) == zlib.crc32(first + second)
    with pytest.raises(ValueError, match="a length is >= 0; got -1"):
        crc32_combine(0, 0, -1)


@pytest.mark.timeout(60)
def test_a_write_waits_while_too_many_bytes_are_queued():
    holder: list = []
    gate = threading.Event()
    raw = Recording(holder, gate=gate)
    holder.append(stream := ShardStream(raw, PendingBytes(10_000)))
    writer = threading.Thread(target=lambda: [stream.write(b"x" * 4000) for _ in range(50)])
    writer.start()
    assert _soon(lambda: stream._pending.count >= 10_000), f"the queue never filled: {stream!r}"
    assert stream.size <= 10_000 + 4000, "writes went on past the bound"
    gate.set()
    writer.join(30)
    stream.finish()
    stream.result()
    assert raw.getvalue() == b"x" * 200_000
    assert max(raw.pending_seen) <= 10_000 + 4000


@pytest.mark.timeout(60)
def test_a_failed_write_is_raised_to_the_writer_and_the_file_is_closed():
    holder: list = []
    raw = Recording(holder, fail_at=2)
    holder.append(stream := ShardStream(raw))
    with pytest.raises(OSError, match="No space left"):
        for _ in range(1000):  # the error comes back from a later write, or at the latest from result()
            stream.write(b"y" * 100)
        stream.finish()
        stream.result()
    assert raw.writes == 2 and raw.closes == 1
    assert stream._pending.count == 0, "the failed stream kept bytes of the shared bound"


@pytest.mark.timeout(60)
def test_shard_writer_raises_a_full_disk_and_abort_returns_every_path():
    streams: list[Recording] = []

    def open_shard(index: int):
        streams.append(Recording(fail_at=3 if index == 1 else None))
        return f"shard-{index}", streams[-1]

    writer = ShardWriter(PAYLOAD, open_shard, WriterOptions(shard_size_bytes=4000))
    with pytest.raises(OSError, match="No space left"):
        for index, row in enumerate(blob_rows([300] * 60)):
            writer.add(row, key=index)
        writer.close()
    paths = writer.abort()
    assert len(streams) >= 2 and paths == [f"shard-{i}" for i in range(len(streams))]
    assert all(stream.closes == 1 for stream in streams)


@pytest.mark.timeout(60)
def test_abort_drops_what_is_queued_and_closes_the_file_unsynced():
    holder: list = []
    gate = threading.Event()
    raw = Recording(holder, gate=gate)
    holder.append(stream := ShardStream(raw))
    for _ in range(10):
        stream.write(b"z" * 1000)
    assert raw.entered.wait(20), "the first write never started"
    aborting = threading.Thread(target=stream.abort)
    aborting.start()
    # The queue is dropped while the first write is held.
    assert _soon(lambda: stream._pending.count == 1000), f"the queue was not dropped: {stream!r}"
    gate.set()
    aborting.join(30)
    assert raw.writes == 1 and raw.closes == 1
    with pytest.raises(Exception, match="aborted"):
        stream.write(b"more")


@pytest.mark.timeout(60)
def test_every_local_shard_is_fsynced_whole_before_close_returns(tmp_path, monkeypatch):
    """The shard thread still syncs each shard to disk (a published shard survives a crash)."""
    synced: dict[str, int] = {}
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        real_fsync(fd)
        synced[os.readlink(f"/proc/self/fd/{fd}")] = os.fstat(fd).st_size

    monkeypatch.setattr(os, "fsync", spy)

    def open_shard(index: int):
        path = str(tmp_path / f"shard-{index}.arrow")
        return path, open(path, "wb")

    writer = ShardWriter(PAYLOAD, open_shard, WriterOptions(shard_size_bytes=4000))
    for index, row in enumerate(blob_rows([300] * 60)):
        writer.add(row, key=index)
    shards = writer.close()
    assert len(shards) > 2
    assert synced == {shard.path: shard.num_bytes for shard in shards}
    assert all(os.path.getsize(shard.path) == shard.num_bytes for shard in shards)
