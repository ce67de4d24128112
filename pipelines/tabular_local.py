"""The csv and jsonl pipelines in this process, without Beam, for small local conversions; and the
choice between that and Beam (`run`).

Starting Beam (its import, building and translating the pipeline, the runner's stages)
costs seconds whatever the input; on a few MB it is most of a run. So a run given no
Beam flag at all, whose inputs are local files of `IN_PROCESS_BYTES` or less together
and whose output is local, is done here: the same reads, inference, casts, checks and
errors as the Beam steps (`tabular_beam`), then the deterministic write run in one
process (`beam_shards.beam.write_in_process`), which writes the shard bytes a Beam
runner writes. Any Beam flag (`--runner=FnApiRunner` too), a larger or remote input, a
remote output or `--dedup` runs on Beam.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from beam_shards import EncodeError, Manifest, new_write_id
from beam_shards.beam import write_in_process
from beam_shards.progress import Tally, Watch
from beam_shards.shards import DEFAULT_BATCH_BYTES, WriterOptions
from beam_shards.storage import fs
from pipelines.bad_inputs import BadInputError, bad_input, record_bad_inputs
from pipelines.cast_batches import examples
from pipelines.flags import input_files, read_flags
from pipelines.inference import inferring
from pipelines.rows import Rows, SetAside, checked
from pipelines.summaries import Summary, merge
from pipelines.tabular import TabularFormat, before_reading, features_of_summary, metadata_of, say_widened

# Inputs up to this size together (compressed ones counted at `_COMPRESSED_GROWTH` times theirs)
# are converted in this process: all their rows are held in memory until written.
IN_PROCESS_BYTES = 64 << 20
_COMPRESSED_GROWTH = 8


def run(tabular: TabularFormat, argv: Sequence[str] | None = None) -> Manifest:
    """Runs the index-file pipeline of `tabular` with command-line flags `argv`, in this process when
    `in_process_problem` finds none, else on Beam; returns the published manifest."""
    parser = tabular.build_parser()
    args, beam_args = read_flags(parser, argv)
    if in_process_problem(args, beam_args) is None:
        files = input_files(parser, args.input)
        if _input_bytes(files) <= IN_PROCESS_BYTES:
            return convert(tabular, parser, args)
    from pipelines.running import run_conversion
    from pipelines.tabular_beam import plan

    return run_conversion(plan(tabular, argv))


def in_process_problem(args: argparse.Namespace, beam_args: list[str]) -> str | None:
    """Why a run with `args` (and `beam_args` for Beam) goes to Beam, whatever its inputs' size; None
    when it can run in this process."""
    if beam_args:
        return f"Beam flags given ({beam_args[0]}...)"
    if not fs.is_local(args.output):
        return f"--output {args.output} is not a local folder"
    if not fs.is_local(args.input):
        return f"--input {args.input} is not local"
    if args.dedup is not None:
        return "--dedup drops duplicates across workers, on Beam"
    return None


def _input_bytes(files: list[str]) -> int:
    return sum(os.path.getsize(fs.local_path(path)) * (_COMPRESSED_GROWTH if path.endswith((".gz", ".zst")) else 1)
               for path in files)


def convert(tabular: TabularFormat, parser: argparse.ArgumentParser, args: argparse.Namespace) -> Manifest:
    """Converts the inputs `args` name in this process, as the Beam steps do, and publishes the cache.

    Raises:
      BadInputError: an input that cannot be parsed, or a row the features refuse (without
        `--skip_bad`); nothing is published.
      TooManyBadError: more bad inputs than `--max_bad` allows; nothing is published.
    """
    files, summarize, features = before_reading(tabular, parser, args)
    batches = [batch for path in files for batch in tabular.read_file(path)]
    if features is None:
        summary = Summary()
        for batch in batches:
            summary = merge(summary, summarize(batch))
        with inferring(parser, files):
            features, widened = features_of_summary(summary, tabular, files, summarize)
        say_widened(widened)
    write_id = new_write_id()
    pairs: list[tuple[Any, Any]] = []
    set_aside: list[Any] = []
    with Watch(args.output, write_id, interval=args.progress.total_seconds()) as watch:
        tally = Tally(watch.folder)
        for batch in batches:
            for pair in examples(batch, features, tabular.read_rows, tabular.to_example, summarize.null_tokens,
                                 tabular.text):
                tally.add(pair[1].table.num_rows if isinstance(pair[1], Rows) else 1)
                for item in checked(pair, features, args.skip_bad):
                    (set_aside.append(item.record) if isinstance(item, SetAside) else pairs.append(item))
        tally.flush()
        skipping = {"on_bad": "skip", "max_bad": args.max_bad} if args.skip_bad else {}
        try:
            written = write_in_process(
                pairs, args.output, features,
                WriterOptions(args.shard_size, None, args.batch_size, DEFAULT_BATCH_BYTES, args.compression),
                metadata=metadata_of(tabular, args), mode=args.mode, allow_empty=args.allow_empty, write_id=write_id,
                set_aside=[{"key": where, "reason": record["error"]} for where, record in set_aside], **skipping)
        except EncodeError as error:  # the write refused an example: a bad input, as --skip_bad says
            raise BadInputError(str(error)) from None
    if args.skip_bad:
        refused = [bad_input(letter["key"], letter["reason"]) for letter in written.letters]
        record_bad_inputs(set_aside + refused, args.output, written.manifest)
    return written.manifest
