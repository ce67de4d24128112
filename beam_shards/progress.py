"""Progress lines for long writes, checks and conversions: what is done so far, and the rate.

`Progress` counts in the process that does the work (`write_shards`, `beam-shards verify`)
and prints `label: N rows, R rows/s` at most every few seconds.

A Beam pipeline's work is done in workers, and Beam's local runners report counters only
once a pipeline ends, so the workers keep a tally of their own: each `Tally` (one per
DoFn instance, in whichever worker process or thread runs it) writes its running row
count into a small file of a local folder, at most once a second and at the end of each
bundle. `Watch`, in the process that runs the pipeline, sums those files every `interval`
seconds, lists what the write has staged so far, and prints

    converting to /data/cache: 120,000 rows, 15,210 rows/s; staged 14 shard file(s), 1.2 GB

Staged files are those of the bundles and of the merge, so a merged row is counted in
both until the publish. Workers on other machines (Dataflow, a remote cluster) cannot
reach the folder: the pipelines watch only runs whose workers are all on this machine.
Every line is made `printable`: a path cannot rewrite the terminal.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from typing import Callable, TextIO

from beam_shards.display import human_size, printable
from beam_shards.format.layout import CacheLayout
from beam_shards.storage import create_new, folders

_WRITE_EVERY = 1.0  # seconds between a tally's writes


def _rate_line(label: str, count: int, unit: str, seconds: float) -> str:
    """`label: N unit, R unit/s`, for `count` done in `seconds`, made printable."""
    return printable(f"{label}: {count:,} {unit}, {count / max(seconds, 1e-9):,.0f} {unit}/s")


class Progress:
    """Prints `label: N rows, R rows/s` to a stream at most every `interval` seconds.

    Args:
      label: what is being done, such as the target path.
      unit: what is counted.
      enabled: None to print only when the stream is a terminal.
      interval: seconds between lines.
      stream: where to print (stderr by default).
    """

    def __init__(self, label: str, unit: str = "rows", *, enabled: bool | None = None,
                 interval: float = 5.0, stream: TextIO | None = None):
        self._stream = stream or sys.stderr
        self.enabled = self._stream.isatty() if enabled is None else enabled
        self._label = label
        self._unit = unit
        self._interval = interval
        self._start = self._last = time.monotonic()
        self.count = 0

    def __repr__(self) -> str:
        return f"Progress({self._label!r}, count={self.count}, enabled={self.enabled})"

    def update(self, done: int = 1, extra: str | Callable[[], str] = "") -> None:
        """Counts `done` more; `extra` (or what it returns, asked only when a line is due) ends the line."""
        self.count += done
        if self.enabled:
            now = time.monotonic()
            if now - self._last >= self._interval:
                self._last = now
                self._print(extra)

    def finish(self, extra: str = "") -> None:
        if self.enabled:
            self._print(extra, final=True)

    def _print(self, extra: str | Callable[[], str], final: bool = False) -> None:
        extra = extra() if callable(extra) else extra
        elapsed = time.monotonic() - self._start
        text = _rate_line(self._label, self.count, self._unit, elapsed)
        if extra:
            text += f", {printable(extra)}"
        if final:
            text += f", done in {max(elapsed, 1e-9):.1f}s"
        print(text, file=self._stream, flush=True)


class Tally:
    """A worker's running count of rows, kept in a file of `folder` for `Watch` to sum.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> tally = Tally(folder); tally.add(3); tally.flush()
        >>> _rows_in(folder)
        3

    Args:
      folder: the local folder the pipeline's `Watch` reads.
    """

    def __init__(self, folder: str):
        self._folder = folder
        self._file = os.path.join(folder, f"{os.getpid()}-{uuid.uuid4().hex}.json")
        self._rows = 0
        self._written = 0.0

    def __repr__(self) -> str:
        return f"Tally({self._folder!r}, rows={self._rows})"

    def add(self, rows: int) -> None:
        self._rows += rows
        if time.monotonic() - self._written >= _WRITE_EVERY:
            self.flush()

    def flush(self) -> None:
        """Writes the count now (the folder gone, once the pipeline ended, is no error)."""
        self._written = time.monotonic()
        temporary = f"{self._file}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with create_new(temporary) as handle:
                handle.write(json.dumps({"rows": self._rows}).encode())
            os.replace(temporary, self._file)
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(temporary)


def _rows_in(folder: str) -> int:
    """The sum of the tallies in `folder` (a file half-written or gone counts as nothing)."""
    total = 0
    for name in os.listdir(folder):
        if name.endswith(".json"):
            try:
                with open(os.path.join(folder, name)) as handle:
                    total += int(json.load(handle)["rows"])
            except (OSError, ValueError, KeyError, TypeError):
                pass
    return total


class Watch:
    """Prints a progress line every `interval` seconds while a pipeline writing to `path` runs.

    Used as a context manager around the run; `folder` is where its workers' `Tally`s
    write. The stream is the process's standard error as it was when the watch began,
    so lines still show while Beam's output is kept out of it (`quiet_beam`).

    Example:
        >>> from beam_shards import new_write_id
        >>> with Watch("/tmp/cache", new_write_id(), interval=5) as watch:
        ...     pass  # run the pipeline, its DoFns counting into Tally(watch.folder)
        >>> watch.rows
        0

    Args:
      path: the cache being written.
      write_id: the write's id (its staged files are counted).
      interval: seconds between lines; 0 prints none.
    """

    def __init__(self, path: str, write_id: str, *, interval: float):
        self._path = path
        self._staging = CacheLayout(path).staging(write_id)
        self._interval = interval
        self.folder = ""
        self.rows = 0
        self.seconds = 0.0
        self._stream: TextIO | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0

    def __repr__(self) -> str:
        return f"Watch({self._path!r}, interval={self._interval}, rows={self.rows})"

    def __enter__(self) -> Watch:
        self.folder = tempfile.mkdtemp(prefix="beam-shards-progress-")
        self._start = time.monotonic()
        if self._interval > 0:
            self._stream = _own_stderr()
            self._thread = threading.Thread(target=self._run, name="beam-shards-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._stream is not None and self._stream is not sys.stderr:
            self._stream.close()
        self.rows = _rows_in(self.folder)
        self.seconds = time.monotonic() - self._start
        shutil.rmtree(self.folder, ignore_errors=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            print(self.line(), file=self._stream, flush=True)

    def line(self) -> str:
        """The progress line as of now."""
        rows = _rows_in(self.folder)
        try:
            staged = folders.list_dir(self._staging, "*.arrow", recursive=True)
        except OSError:
            staged = {}
        return (_rate_line(f"converting to {self._path}", rows, "rows", time.monotonic() - self._start)
                + f"; staged {len(staged)} shard file(s), {human_size(sum(staged.values()))}")


def _own_stderr() -> TextIO:
    """A stream to standard error as it is now: a copy of its file descriptor, which a
    redirection of descriptor 2 (`quiet_beam`) leaves alone; `sys.stderr` itself when it
    has no descriptor (replaced in Python, as by a notebook or pytest)."""
    sys.stderr.flush()
    try:
        descriptor = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.stderr
    return os.fdopen(os.dup(descriptor), "w")
