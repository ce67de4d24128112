"""How many forks led to this process: what a reader keeps per process (memory maps, locks, the open
shards) is made anew in a child, which tells by this count changing, not by a `getpid` system call
on every read (0.2 us of a 5.7 us random row)."""

from __future__ import annotations

import os

_count = 0


def _forked() -> None:
    global _count
    _count += 1


os.register_at_fork(after_in_child=_forked)


def forks() -> int:
    """The forks since this module was imported in the process's first ancestor that imported it."""
    return _count
