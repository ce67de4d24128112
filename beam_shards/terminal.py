"""What the command lines print when something goes wrong, made safe for a terminal.

`beam-shards` and the conversion pipelines print their errors through `print_error`,
and parse their flags with this `ArgumentParser`, whose usage errors go the same way:
a file name, a CSV header or a JSON key holding an escape sequence is shown escaped
(`\\x1b`), never acted on, and a message stays on its lines. Printable text, accented
letters and other scripts included, is printed as it is.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, TextIO

from beam_shards.display import printable


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
