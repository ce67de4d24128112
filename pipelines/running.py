"""Running a pipeline: the Beam run with its progress and its clean-up, and the command line around it.

`run_pipeline` runs a pipeline's steps into `write.write_cache` and returns the published
manifest; `main` turns a pipeline's `run(argv)` into what the shell sees: the report, or
one error line (exit status 1) with no traceback above it unless `--verbose`.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_shards import BeamShardsError, EncodeError, Features, Manifest, abandon, new_write_id, read_metadata
from beam_shards.beam import quiet_beam
from beam_shards.errors import best_effort
from beam_shards.progress import Watch
from beam_shards.terminal import print_error, quiet_broken_pipe, say
from beam_shards.versions import find_published
from pipelines.bad_inputs import BadInputError
from pipelines.flags import check_dedup
from pipelines.report import report
from pipelines.runners import workers_on_this_machine
from pipelines.write import write_cache

_WORKER_ERROR = re.compile(r"^(?:pipelines|beam_shards)\.[\w.]*?(\w+Error): (.+)$", re.MULTILINE)
# What Beam adds to the message of an error raised in one of its steps.
_BEAM_STEP = re.compile(r" \[while running '[^']*'\]")
_SKIP_BAD_HINT = "(add --skip_bad to skip bad inputs and list them beside the cache)"


def run_pipeline(options: PipelineOptions, args: argparse.Namespace,
                 read: Callable[[beam.Pipeline], beam.PCollection | tuple[beam.PCollection, beam.PCollection]],
                 features: Features | None, metadata: dict[str, Any]) -> Manifest:
    """Runs `read` (which adds the steps making `(where, example)` pairs) into `write_cache`.

    For features made when the pipeline runs (inferred by a Beam combine, say), `features`
    is None and `read` returns `(pairs, features)`, the features a PCollection of one
    `Features`; `write_cache` and the sink read it as a side input.

    Returns the manifest published at `args.output`. When the pipeline fails, what its
    bundles staged is removed before the error is raised again, so a failed conversion
    leaves nothing behind but the previous cache. Beam's log and what its workers print
    are kept out of the output unless `args.verbose` (see `beam_shards.beam.noise`); when
    the workers run on this machine, a progress line is printed every `args.progress`.
    """
    if features is not None:
        check_dedup(args, features)
    write_id = new_write_id()
    local = workers_on_this_machine(options)
    interval = args.progress.total_seconds() if local else 0
    try:
        with (Watch(args.output, write_id, interval=interval) as watch, quiet_beam(args.verbose),
              beam.Pipeline(options=options) as pipeline):
            examples, made = _with_features(read(pipeline), features)
            write_cache(examples, args, made, metadata, write_id, watch.folder if local else None)
    except Exception as error:
        # Not on KeyboardInterrupt: a remote job may still be running and using its staging.
        with best_effort(f"remove the files of failed write {write_id}", args.output):
            abandon(args.output, write_id)
        if isinstance(error, EncodeError):  # the sink refused an example: a bad input, as --skip_bad says
            raise BadInputError(str(error)) from None
        raise
    return find_published(args.output, write_id) or read_metadata(args.output)


def _with_features(read: Any, features: Features | None) -> tuple[Any, Any]:
    """`(pairs, features)` from what `read` returned and the features given.

    Raises:
      ValueError: `read` returned features and features were given too, or what it returned as
        features is not a PCollection.
    """
    if not isinstance(read, tuple):
        return read, features
    if features is not None:
        raise ValueError("run_pipeline takes features given or made when the pipeline runs, not both: read "
                         "returned (pairs, features) and features were given")
    examples, made = read
    if not isinstance(made, beam.PCollection):
        raise ValueError(f"read returned (pairs, {type(made).__name__}); features made when the pipeline runs are a "
                         "PCollection of one Features")
    return examples, made


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
