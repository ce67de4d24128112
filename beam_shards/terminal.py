"""What the command lines print when something goes wrong, made safe for a terminal.

`beam-shards` and the conversion pipelines print their errors through `print_error`,
and parse their flags with this `ArgumentParser`, whose usage errors go the same way:
a file name, a CSV header or a JSON key holding an escape sequence is shown escaped
(`\\x1b`), never acted on, and a message stays on its lines. Printable text, accented
letters and other scripts included, is printed as it is. Output piped to a reader that
stops early (`beam-shards info ... | head`) ends quietly (`quiet_broken_pipe`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn, TextIO

from beam_shards.display import printable

# What a shell reports for a process that wrote to a pipe its reader had closed (128 + SIGPIPE),
# as `yes | head -1` leaves `yes`; 1 where there is no SIGPIPE.
BROKEN_PIPE_STATUS = 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 1


def say(*lines: str, file: TextIO | None = None) -> None:
    """Prints each line made `printable`, so that nothing in it can rewrite the terminal."""
    print("\n".join(printable(line) for line in lines), file=file)


def print_error(label: str, message: str, *hints: str) -> None:
    """Prints `label: message`, then each hint on a line of its own, to standard error.

    Example:
        >>> import contextlib, io
        >>> with contextlib.redirect_stderr(io.StringIO()) as err:
        ...     print_error("error", "data.csv, line 2: column 'a\\x1b[2J' is empty")
        >>> err.getvalue()
        "error: data.csv, line 2: column 'a\\\\x1b[2J' is empty\\n"
    """
    say(f"{label}: {message}", *hints, file=sys.stderr)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, with its usage errors (which quote the command line) made printable."""

    def error(self, message: str) -> NoReturn:
        super().error(printable(message))


def quiet_broken_pipe(command: Callable[[], int]) -> int:
    """`command()`'s exit status; `BROKEN_PIPE_STATUS`, printing nothing more, when its standard
    output was closed by the reader before all of it was written.

    Python's documented recipe: standard output is flushed here, so a closed pipe shows up
    now rather than at exit, and is then pointed at the null device, so the flush at exit
    writes nowhere instead of printing a traceback.
    """
    try:
        try:
            status = command()
        except SystemExit:  # argparse's --help and --version print, then exit
            sys.stdout.flush()
            raise
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE_STATUS
