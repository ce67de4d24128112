"""The stream a shard is written through: counted, checksummed, written and synced on a thread of its own.

pyarrow's IPC writer hands every piece of a shard to `ShardStream.write`, which only
queues it; a thread feeds the pieces to the CRC and to the file, then flushes, syncs
and closes it. CRC-32, file writes and fsync all release the GIL, so with two cores
they cost the thread that encodes rows nothing: before, they were a third of a local
write. What pyarrow hands over is immutable (bytes, or its own buffers), so holding on
to it until the thread is done is safe.

The thread also takes a CRC-32 of each record batch's bytes alone (format 5): the writer marks
where a batch begins and ends (`begin_span`, `end_span`), and `spans()` gives them once written.
A batch's bytes are read once: the file's CRC-32 takes the batch's by combining the two.
"""

from __future__ import annotations

import collections
import os
import threading
from typing import Any, BinaryIO

from beam_shards.storage.checksum import Crc32, crc32

# Bytes queued and not yet written at most; a write waits for the thread past this.
_DEFAULT_MAX_PENDING_BYTES = 16 << 20
_DONE = None


class _Mark:
    """A point in the queue: a span of the file begins at `position` (`begin`) or ends there."""

    __slots__ = ("begin", "position")

    def __init__(self, begin: bool, position: int):
        self.begin = begin
        self.position = position


class PendingBytes:
    """The bytes queued across the streams that share it, at most `max_bytes` (plus one piece).

    A writer's open shard and the shard still finishing behind it share one, so what
    they hold together stays within the bound.
    """

    def __init__(self, max_bytes: int = _DEFAULT_MAX_PENDING_BYTES):
        self.max_bytes = max_bytes
        self.count = 0
        self.changed = threading.Condition()

    def __repr__(self) -> str:
        return f"PendingBytes(count={self.count}, max_bytes={self.max_bytes})"


class ShardStream:
    """A write-only stream that writes, checksums and syncs `raw` on a thread; `result()` waits for it.

    Example:
        >>> import io
        >>> raw = io.BytesIO(); raw.close = lambda: None
        >>> stream = ShardStream(raw)
        >>> stream.write(b"hello ") + stream.write(b"world")
        11
        >>> stream.finish(); stream.result()
        'crc32:0d4a1185'
        >>> raw.getvalue()
        b'hello world'

    Args:
      raw: the shard's file or object, closed by the thread once everything is written
        (after an fsync where it is a local file).
      pending: the bound on bytes queued, shared with other streams, before `write`
        waits; by default one of `_DEFAULT_MAX_PENDING_BYTES` for this stream alone.

    Raises:
      The error the thread met (a full disk, a failed upload), from the next `write`,
      `finish` or `result`.
    """

    def __init__(self, raw: BinaryIO, pending: PendingBytes | None = None):
        self._raw = raw
        self._pending = pending or PendingBytes()
        self._queue: collections.deque[memoryview | _Mark | None] = collections.deque()
        self._changed = self._pending.changed
        self._error: BaseException | None = None
        self._crc = Crc32()
        # The spans marked so far, (offset, length, CRC-32), and the one open: (offset, CRC so far).
        self._spans: list[tuple[int, int, int]] = []
        self._open_span: tuple[int, int] | None = None
        self.size = 0
        self.closed = False
        self._thread = threading.Thread(target=self._run, name="beam_shards-shard-stream", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"ShardStream(size={self.size}, queued={len(self._queue)}, closed={self.closed})"

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        with self._changed:
            while self._pending.count > self._pending.max_bytes and self._error is None:
                self._changed.wait()
            self._raise_error()
            self._queue.append(view)
            self._pending.count += view.nbytes
            self._changed.notify_all()
        self.size += view.nbytes
        return view.nbytes

    def begin_span(self, offset: int) -> None:
        """Marks that a span (a record batch) begins at byte `offset`, at or after what is written so far."""
        self._put(_Mark(True, offset))

    def end_span(self) -> None:
        """Marks that the open span ends at what is written so far."""
        self._put(_Mark(False, self.size))

    def spans(self) -> tuple[tuple[int, int, int], ...]:
        """(offset, length, CRC-32) of each span marked, once `result()` returned."""
        return tuple(self._spans)

    def tell(self) -> int:
        return self.size

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def flush(self) -> None:
        """Nothing: the thread flushes `raw` once the shard is whole."""

    def close(self) -> None:
        # pyarrow closes its sink when its IPC writer closes; `finish` ends the shard.
        self.closed = True

    def finish(self) -> None:
        """Queues the end of the shard: once all is written, `raw` is synced and closed."""
        self._put(_DONE)

    def result(self) -> str:
        """Waits until `raw` is written, synced and closed; returns the checksum of all written."""
        self._thread.join()
        self._raise_error()
        return self._crc.checksum()

    def abort(self) -> None:
        """Drops what is queued, closes `raw` unsynced and waits for the thread (errors are dropped)."""
        with self._changed:
            self._drop_queue()
            self._queue.append(_DONE)
            self._error = self._error or _Aborted("the shard's stream was aborted")
            self._changed.notify_all()
        self._thread.join()

    def _put(self, item: memoryview | _Mark | None) -> None:
        with self._changed:
            self._raise_error()
            self._queue.append(item)
            self._changed.notify_all()

    def _drop_queue(self) -> None:
        """Empties the queue, giving its bytes back to the bound (the caller holds the lock)."""
        self._pending.count -= sum(item.nbytes for item in self._queue if isinstance(item, memoryview))
        self._queue.clear()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            while True:
                with self._changed:
                    while not self._queue:
                        self._changed.wait()
                    item = self._queue.popleft()
                    if item is _DONE and self._error is not None:  # aborted
                        break
                if item is _DONE:
                    _sync(self._raw)
                    break
                if isinstance(item, _Mark):
                    self._mark(item)
                    continue
                try:
                    self._checksum(item)
                    self._raw.write(item)
                finally:  # given back even when the write fails: the bound is shared
                    with self._changed:
                        self._pending.count -= item.nbytes
                        self._changed.notify_all()
        except BaseException as error:  # noqa: BLE001 - handed to the writing thread
            with self._changed:
                self._error = error
                self._drop_queue()
                self._changed.notify_all()
        finally:
            try:
                self._raw.close()
            except BaseException as error:  # noqa: BLE001 - an upload fails on close
                with self._changed:
                    self._error = self._error or error


    def _mark(self, mark: _Mark) -> None:
        if mark.begin:
            self._open_span = (mark.position, 0)
        else:
            offset, crc = self._open_span
            length = mark.position - offset
            self._spans.append((offset, length, crc))
            self._crc.extend(crc, length)
            self._open_span = None

    def _checksum(self, item: memoryview) -> None:
        """Feeds `item` to the file's CRC, but its part inside the open span to the span's CRC
        alone: `_mark` adds the span's whole to the file's when it ends."""
        if self._open_span is None:
            self._crc.update(item)
            return
        offset, crc = self._open_span
        # The file's CRC holds every byte before the span: what of `item` comes before it goes there.
        before = min(max(0, offset - self._crc.size), item.nbytes)
        if before:
            self._crc.update(item[:before])
        if before < item.nbytes:
            self._open_span = (offset, crc32(item[before:], crc))


class _Aborted(Exception):
    """The stream was aborted: nothing more is written."""


def _sync(raw: BinaryIO) -> None:
    """Flushes `raw` to disk where it is a local file, so a published shard survives a crash."""
    if hasattr(raw, "flush"):  # a bare upload stream may have write and close only
        raw.flush()
    try:
        fileno = raw.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a local file: an object-store upload commits on close
    os.fsync(fileno)
