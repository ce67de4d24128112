"""The csv and jsonl pipelines in this process, without Beam, for small local conversions; and the
choice between that and Beam (`run`).

A run that `local_write.in_process_problem` finds none for, whose inputs are local files of
`IN_PROCESS_BYTES` or less together (their rows are held in memory until written), is done
here: the same reads, inference and casts as the Beam steps (`tabular_beam`), then
`local_write.write_here`. Any Beam flag (`--runner=FnApiRunner` too), a larger or remote
input, a remote output or `--dedup` runs on Beam.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Sequence
from typing import Any

from beam_shards import Manifest
from beam_shards.storage import fs
from pipelines.cast_batches import examples
from pipelines.flags import input_files
from pipelines.inference import inferring
from pipelines.local_write import check_output, run_here_or_on_beam, write_here
from pipelines.opening import COMPRESSED
from pipelines.summaries import Summary, merge
from pipelines.tabular import TabularFormat, before_reading, features_of_summary, metadata_of, say_widened

# Inputs up to this size together (compressed ones counted at `_COMPRESSED_GROWTH` times theirs)
# are converted in this process: all their rows are held in memory until written.
IN_PROCESS_BYTES = 64 << 20
_COMPRESSED_GROWTH = 8


def run(tabular: TabularFormat, argv: Sequence[str] | None = None) -> Manifest:
    """Runs the index-file pipeline of `tabular` with command-line flags `argv`, in this process when
    `local_write.in_process_problem` finds none and the inputs are small, else on Beam; returns the
    published manifest."""
    return run_here_or_on_beam(argv, tabular.build_parser, functools.partial(_here, tabular),
                               functools.partial(_plan_on_beam, tabular))


def _here(tabular: TabularFormat, parser: argparse.ArgumentParser, args: argparse.Namespace) -> Manifest | None:
    """`convert` when the inputs are of `IN_PROCESS_BYTES` or less together, else None (for Beam)."""
    files = input_files(parser, args.input)
    return convert(tabular, parser, args) if _input_bytes(files) <= IN_PROCESS_BYTES else None


def _plan_on_beam(tabular: TabularFormat, argv: Sequence[str] | None) -> Any:
    from pipelines.tabular_beam import plan  # imports Beam: only for a run on Beam

    return plan(tabular, argv)


def _input_bytes(files: list[str]) -> int:
    return sum(os.path.getsize(fs.local_path(path)) * (_COMPRESSED_GROWTH if path.endswith(COMPRESSED) else 1)
               for path in files)


def convert(tabular: TabularFormat, parser: argparse.ArgumentParser, args: argparse.Namespace) -> Manifest:
    """Converts the inputs `args` name in this process, as the Beam steps do, and publishes the cache.

    Raises:
      BadInputError: an input that cannot be parsed, or a row the features refuse (without
        `--skip_bad`); nothing is published.
      TooManyBadError: more bad inputs than `--max_bad` allows; nothing is published.
    """
    files, summarize, features = before_reading(tabular, parser, args)
    check_output(args, features, metadata_of(tabular, args))
    batches = [batch for path in files for batch in tabular.read_file(path)]
    if features is None:
        summary = Summary()
        for batch in batches:
            summary = merge(summary, summarize(batch))
        with inferring(parser, files):
            features, widened = features_of_summary(summary, tabular, files, summarize)
        say_widened(widened)
    pairs = (pair for batch in batches for pair in examples(batch, features, tabular.read_rows, tabular.to_example,
                                                            summarize.null_tokens, tabular.text))
    return write_here(pairs, args, features, metadata_of(tabular, args))
