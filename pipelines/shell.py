"""What the shell sees of a pipeline: `main` turns its `run(argv)` into a report, or one error
line (exit status 1) with no traceback above it unless `--verbose`; `run_script` is
`python -m pipelines.NAME`. No Beam here: a conversion that runs without it starts without it.
"""

from __future__ import annotations

import importlib
import re
import sys
import time
import traceback
from collections.abc import Callable, Sequence

from beam_shards import BeamShardsError, EncodeError, Manifest
from beam_shards.terminal import print_error, quiet_broken_pipe, say
from pipelines.bad_inputs import BadInputError
from pipelines.report import report

_WORKER_ERROR = re.compile(r"^(?:pipelines|beam_shards)\.[\w.]*?(\w+Error): (.+)$", re.MULTILINE)
# What Beam adds to the message of an error raised in one of its steps.
_BEAM_STEP = re.compile(r" \[while running '[^']*'\]")
_SKIP_BAD_HINT = "(add --skip_bad to skip bad inputs and list them beside the cache)"


def main(run: Callable[[Sequence[str] | None], Manifest], argv: Sequence[str] | None = None) -> int:
    """Runs a pipeline's `run(argv)` for the command line: a report, or a one-line error (with the
    traceback above it and Beam's log only under `--verbose`)."""
    verbose = "--verbose" in (sys.argv[1:] if argv is None else argv)
    start = time.monotonic()
    try:
        manifest = run(argv)
    except BeamShardsError as error:
        return _print_error(str(error), isinstance(error, (BadInputError, EncodeError)), verbose)
    except Exception as error:
        # Runners with workers in other processes raise an error of their own that holds
        # the worker's traceback; show the error it ends with, as if raised here.
        found = _WORKER_ERROR.findall(str(error))
        if not found:
            raise
        name, message = found[-1]
        return _print_error(message, name in (BadInputError.__name__, EncodeError.__name__), verbose)
    say(*report(manifest, time.monotonic() - start))
    return 0


def without_beam_step(message: str) -> str:
    """`message` without what Beam adds to that of an error raised in one of its steps (which step ran)."""
    return _BEAM_STEP.sub("", message)


def _print_error(message: str, bad_input: bool, verbose: bool) -> int:
    if verbose:
        traceback.print_exc()
    print_error("error", without_beam_step(message), *([_SKIP_BAD_HINT] if bad_input else []))
    return 1


def run_script(module_name: str) -> None:
    """`python -m pipelines.NAME`: runs that module's `run` with the process arguments, then exits (quietly when
    the reader of its report stops early).

    The module is imported by its name rather than used as `__main__`, so the
    functions Beam pickles are referenced by a name workers can import too.
    """
    module = importlib.import_module(module_name)
    raise SystemExit(quiet_broken_pipe(lambda: main(module.run)))
