"""Progress lines for long writes and checks: rows (or items) done and the rate."""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


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
        elapsed = max(time.monotonic() - self._start, 1e-9)
        rate = self.count / elapsed
        text = f"{self._label}: {self.count:,} {self._unit}, {rate:,.0f} {self._unit}/s"
        if extra:
            text += f", {extra}"
        if final:
            text += f", done in {elapsed:.1f}s"
        print(text, file=self._stream, flush=True)
