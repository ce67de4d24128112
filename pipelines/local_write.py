"""A conversion's write in this process, without Beam: when a run may take it (`in_process_problem`),
and the write itself (`write_here`), which checks `(where, example)` pairs as the Beam step does
(`rows.checked`) and writes them with `beam_shards.beam.write_in_process`, so the rows, shard
bytes, bad-input list and errors are those of a run on Beam.

Starting Beam (its import, building and translating the pipeline, the runner's stages) costs
seconds whatever the input, most of a small conversion's time; Beam's local runner runs in
one process too.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from beam_shards import EncodeError, Features, Manifest, new_write_id
from beam_shards.beam import write_in_process
from beam_shards.progress import Tally, Watch
from beam_shards.shards import DEFAULT_BATCH_BYTES, WriterOptions
from beam_shards.storage import fs
from beam_shards.versions import check_write
from pipelines.bad_inputs import BadInputError, as_dead_letter, from_dead_letter, record_bad_inputs
from pipelines.flags import read_flags
from pipelines.rows import SetAside, checked, rows_in
from pipelines.where import Where


def run_here_or_on_beam(argv: Sequence[str] | None, build_parser: Callable[[], argparse.ArgumentParser],
        here: Callable[[argparse.ArgumentParser, argparse.Namespace], Manifest | None],
        plan: Callable[[Sequence[str] | None], Any]) -> Manifest:
    """Runs a pipeline with command-line flags `argv`: `here(parser, args)` when `in_process_problem`
    finds none (it returns None for an input it leaves to Beam), else `plan(argv)`'s conversion on
    Beam; returns the published manifest."""
    parser = build_parser()
    args, beam_args = read_flags(parser, argv)
    if in_process_problem(args, beam_args) is None:
        manifest = here(parser, args)
        if manifest is not None:
            return manifest
    from pipelines.running import run_conversion

    return run_conversion(plan(argv))


def in_process_problem(args: argparse.Namespace, beam_args: list[str]) -> str | None:
    """Why a run with `args` (and `beam_args` for Beam) goes to Beam, whatever its input's size; None
    when it can run in this process: no Beam flag at all, a local input and output, no `--dedup`."""
    if beam_args:
        return f"Beam flags given ({beam_args[0]}...)"
    if not fs.is_local(args.output):
        return f"--output {args.output} is not a local folder"
    if not fs.is_local(args.input):
        return f"--input {args.input} is not local"
    if args.dedup is not None:
        return "--dedup drops duplicates across workers, on Beam"
    return None


def check_output(args: argparse.Namespace, features: Features | None, metadata: dict[str, Any]) -> None:
    """What the sink checks when a pipeline is built, before any input is read: that `args.mode` may
    write over what is at `args.output`, and with `features` known, that they fit an append's
    cache; so errors come in the order they come on Beam (raises as `versions.check_write`)."""
    check_write(args.output, features, metadata, args.mode)


def write_here(pairs: Iterable[tuple[Where, Any]], args: argparse.Namespace, features: Features,
               metadata: dict[str, Any]) -> Manifest:
    """Writes `(where, example)` pairs (an example may be `Rows` or `Malformed`) into the cache at
    `args.output` in this process, as `write.write_cache` does on Beam, and publishes it.

    Raises:
      BadInputError: an input that cannot be parsed, or an example the features refuse (without
        `--skip_bad`); nothing is published.
      TooManyBadError: more bad inputs than `--max_bad` allows; nothing is published.
    """
    write_id = new_write_id()
    kept: list[tuple[Where, Any]] = []
    set_aside: list[tuple[Where, dict[str, Any]]] = []
    with Watch(args.output, write_id, interval=args.progress.total_seconds()) as watch:
        tally = Tally(watch.folder)
        for pair in pairs:
            tally.add(rows_in(pair[1]))
            for item in checked(pair, features, args.skip_bad):
                (set_aside.append(item.record) if isinstance(item, SetAside) else kept.append(item))
        tally.flush()
        skipping = {"on_bad": "skip", "max_bad": args.max_bad} if args.skip_bad else {}
        try:
            written = write_in_process(
                kept, args.output, features,
                WriterOptions(args.shard_size, None, args.batch_size, DEFAULT_BATCH_BYTES, args.compression),
                metadata=metadata, mode=args.mode, allow_empty=args.allow_empty, write_id=write_id,
                set_aside=[as_dead_letter(record) for record in set_aside], **skipping)
        except EncodeError as error:  # the write refused an example: a bad input, as --skip_bad says
            raise BadInputError(str(error)) from None
    if args.skip_bad:
        record_bad_inputs(set_aside + [from_dead_letter(letter) for letter in written.letters], args.output,
                          written.manifest)
    return written.manifest
