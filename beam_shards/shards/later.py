"""A call run on a worker thread while the caller goes on; its result (or error) is taken later.

The writer checks and encodes batches this way: what they do is numpy and Arrow work
that mostly runs without the GIL, so on a second core it costs the thread that gathers
rows little. The workers are few, shared by every writer of the process and made once
(a thread started per call would cost a wait for it to start); a small call runs
where it is made.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

_WORKERS = 2
_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (the process it was made in, the pool)


class Later:
    """`call(*args)`, on a worker thread when `threaded`, else at once; `result()` waits for it.

    Example:
        >>> Later(sum, [1, 2, 3], threaded=True).result()
        6

    Args:
      call: what to run.
      args: its arguments.
      threaded: whether to run it on a worker thread.
    """

    def __init__(self, call: Callable[..., Any], *args: Any, threaded: bool):
        self.threaded = threaded
        self._future: Future = Future()
        if threaded:
            self._future = _workers().submit(call, *args)
            return
        try:
            self._future.set_result(call(*args))
        except BaseException as error:  # noqa: BLE001 - raised by result(), as a worker's would be
            self._future.set_exception(error)

    def __repr__(self) -> str:
        return f"Later(done={self._future.done()})"

    def result(self) -> Any:
        """Waits for the call; returns what it returned, or raises what it raised."""
        return self._future.result()


def _workers() -> ThreadPoolExecutor:
    """The process's pool of workers (a forked child makes its own: its parent's threads are not in it)."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(_WORKERS, thread_name_prefix="beam_shards-later"))
        return _pool[1]
