"""Beam's log noise kept out of what a command prints.

Two messages Beam logs on every run are no news to a user of a conversion pipeline or
of `beam-shards`: "apitools not found" (logged on the root logger while Beam imports its
BigQuery clients) and "Process method returned None". `drop_known_noise` filters them
from the root logger; `quiet_beam` also raises Beam's loggers to CRITICAL while a
command runs, so a failing bundle's ERROR and traceback do not stand above the one-line
error the command prints (`--verbose` shows them), and sends what is written to the
process's standard error meanwhile (by Beam, and by the worker processes that
multi-process runners start, which inherit it) to the null device.
Nothing here imports Beam.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

_NOISE = ("apitools not found", "Process method returned None")


class _KnownNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(_NOISE))


_FILTER = _KnownNoise()


def drop_known_noise() -> None:
    """Filters Beam's known noise from the root logger (and from Beam's, where the second is logged); idempotent."""
    for name in ("", "apache_beam.transforms.core"):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


@contextlib.contextmanager
def quiet_beam(verbose: bool) -> Iterator[None]:
    """Unless `verbose`: Beam's loggers at CRITICAL, and standard error (file descriptor 2, so
    worker processes' too) sent to the null device while the block runs; both are
    restored after."""
    if verbose:
        yield
        return
    logger = logging.getLogger("apache_beam")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as dropped:
            os.dup2(dropped.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)
        logger.setLevel(level)
