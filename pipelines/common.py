"""What every conversion pipeline shares: its flags, the runner default, handing
examples to the sink (skipping bad ones with `--skip_bad`), and the final report.

A pipeline module builds an argument parser with `make_parser`, reads its flags with
`parse_args` (every flag it does not know goes to Beam's `PipelineOptions`), and gives
`run_pipeline` a function that turns its input into `(where, example)` pairs. `where`, a
`Where`, is the example's key: rows are written in its order (input file, then position),
and every error names the input by it ("data.csv, line 7").
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import functools
import importlib
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pvalue import AsSingleton, TaggedOutput

from beam_shards.beam import counters
from beam_shards.beam.noise import quiet_beam
from beam_shards.beam.sink import WriteToArrowShards
from beam_shards.progress import Tally, Watch
from beam_shards.display import human_size
from beam_shards.errors import BeamShardsError, EncodeError, FeatureError, best_effort
from beam_shards.features import Features
from beam_shards.format.catalog import read_metadata
from beam_shards.format.layout import new_write_id
from beam_shards.format.manifest import COMPRESSIONS, MODES, Manifest
from beam_shards.shards.options import DEFAULT_BATCH_SIZE, DEFAULT_SHARD_SIZE_BYTES
from beam_shards.shards.writer import EncodedRows
from beam_shards.storage import folders, fs
from beam_shards.units import count_flag, duration_flag, size_flag
from beam_shards.versions.bad_inputs import bad_inputs_path, read_bad_inputs, write_bad_inputs
from beam_shards.versions.commit import abandon, find_published
from pipelines.runners import local_output_problem, unknown_runner_problem, workers_on_this_machine
from pipelines.where import Where

DEFAULT_RUNNER = "FnApiRunner"
# The file extensions of images, as the pipelines recognise them in paths (lower case).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff")
_BAD = "bad"
_WORKER_ERROR = re.compile(r"^(?:pipelines|beam_shards)\.[\w.]*?(\w+Error): (.+)$", re.MULTILINE)

_RUNNER_HELP = """\
Every other flag goes to Beam's PipelineOptions. Without --runner the pipeline runs
locally on the FnApiRunner (add --direct_num_workers=N --direct_running_mode=multi_processing
to use N processes). The same command runs on Dataflow or Flink with their flags, e.g.
  --runner=DataflowRunner --project=PROJECT --region=REGION --temp_location=gs://BUCKET/tmp --setup_file=./setup.py
  --runner=FlinkRunner --flink_master=HOST:PORT --environment_type=LOOPBACK
A local --output needs every worker on this machine (a local runner, or LOOPBACK);
with workers elsewhere write to a shared location such as gs://BUCKET/cache.
"""


class BadInputError(BeamShardsError, ValueError):
    """An input that cannot become an example: unreadable, malformed or incomplete."""


class Malformed:
    """Stands for an example in the `(where, example)` stream when its input could not be parsed.

    Readers yield it instead of raising, so `write_cache` decides in one place whether
    a bad input fails the pipeline or is skipped.

    Example:
        >>> (Where.at("data.csv", 7, "line"), Malformed("has 2 fields, the header has 3"))
        ('data.csv, line 7', Malformed('has 2 fields, the header has 3'))

    Args:
      reason: what is wrong with the input, for a person.
    """

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"Malformed({self.reason!r})"


class Rows:
    """Stands for several examples at once in the `(where, example)` stream: rows in Arrow form.

    `write_cache` checks the columns against the features all at once
    (`Features.encode_batch`) and hands them to the sink whole, encoded, so the sink
    does not check them again. When they do not fit, the rows from `one_by_one()` go
    to the sink one at a time instead, so a bad row is named, and with `--skip_bad`
    skipped alone.

    Example:
        >>> import pyarrow as pa
        >>> Rows(pa.table({"n": [1, 2]}), lambda: iter([(Where("f", 0), {"n": 1}), (Where("f", 1), {"n": 2})]))
        Rows(2 rows)

    Args:
      table: a pyarrow Table or RecordBatch with a column per feature.
      one_by_one: returns an iterator of the same rows as `(where, example)` pairs; it
        must pickle (a module-level function or a `functools.partial` of one), since
        Beam may ship a `Rows` between workers.
    """

    def __init__(self, table: pa.Table | pa.RecordBatch, one_by_one: Callable[[], Iterator[tuple[Where, Any]]]):
        self.table = table
        self.one_by_one = one_by_one

    def __repr__(self) -> str:
        return f"Rows({self.table.num_rows} rows)"


def make_parser(name: str, description: str, *, default_output: str | None = None) -> argparse.ArgumentParser:
    """The parser of `python -m pipelines.NAME`, with the flags every pipeline takes."""
    parser = argparse.ArgumentParser(
        prog=f"python -m pipelines.{name}", description=description, epilog=_RUNNER_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    output_help = "the cache folder to write (local, gs://, s3://...)"
    if default_output is None:
        parser.add_argument("--output", required=True, help=output_help)
    else:
        parser.add_argument("--output", default=default_output, help=f"{output_help}; default {default_output}")
    parser.add_argument("--shard_size", type=size_flag, default=DEFAULT_SHARD_SIZE_BYTES, metavar="SIZE",
                        help="target size of a shard on disk, like 64MB or 1GiB (default 128MiB)")
    parser.add_argument("--batch_size", type=count_flag, default=DEFAULT_BATCH_SIZE, metavar="ROWS",
                        help=f"rows per Arrow record batch at most (default {DEFAULT_BATCH_SIZE})")
    parser.add_argument("--compression", choices=[str(c).lower() for c in COMPRESSIONS], default="none",
                        help="shard compression; none (the default) lets readers memory-map shards with no copy")
    parser.add_argument("--mode", choices=MODES, default="overwrite",
                        help="overwrite (default): publish a version of these rows alone; append: the latest "
                             "version's rows plus these; error: refuse an --output that already holds a cache")
    parser.add_argument("--no_deterministic", dest="deterministic", action="store_false",
                        help="write rows in the order bundles finish (faster) instead of input order; by default "
                             "the same input gives the same rows, order and shard bytes on any runner")
    parser.add_argument("--allow_empty", action="store_true",
                        help="publish a version of no rows when the input holds none, instead of failing")
    parser.add_argument("--progress", type=duration_flag, default=datetime.timedelta(seconds=5), metavar="SECONDS",
                        help="seconds between progress lines when the workers run on this machine (default 5s; "
                             "0 for none)")
    parser.add_argument("--verbose", action="store_true",
                        help="show Beam's log, and the traceback above an error")
    parser.add_argument("--skip_bad", action="store_true",
                        help="skip inputs that cannot be read (counted in the Beam counter beam_shards:bad_inputs "
                             "and listed in OUTPUT/_bad_inputs.jsonl) instead of failing")
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> tuple[argparse.Namespace,
                                                                                     PipelineOptions]:
    """This pipeline's flags, and `PipelineOptions` from all the others (FnApiRunner by default)."""
    args, beam_args = parser.parse_known_args(argv)
    unknown = [arg.split("=", 1)[0] for arg in beam_args if arg.startswith("-") and arg.split("=", 1)[0]
               not in _beam_flags()]
    if unknown:
        known = [flag for action in parser._actions for flag in action.option_strings] + sorted(_beam_flags())
        nearest = difflib.get_close_matches(unknown[0], known, n=1, cutoff=0.6)
        parser.error(f"unrecognized argument {unknown[0]}" + (f"; did you mean {nearest[0]}?" if nearest else
                                                               " (not a flag of this pipeline or of Beam)"))
    args.compression = None if args.compression == "none" else args.compression
    options = PipelineOptions(beam_args)
    standard = options.view_as(StandardOptions)
    if standard.runner is None:
        # Beam's own default, the DirectRunner, would start (and may download) Prism.
        standard.runner = DEFAULT_RUNNER
    problem = unknown_runner_problem(options) or local_output_problem(args.output, options)
    if problem:
        parser.error(problem)
    return args, options


@functools.cache
def _beam_flags() -> frozenset[str]:
    """Every flag Beam's PipelineOptions (and each of its option groups) takes."""
    parser = argparse.ArgumentParser(allow_abbrev=False, conflict_handler="resolve")
    groups, seen = [PipelineOptions], set()
    while groups:
        group = groups.pop()
        if group not in seen:
            seen.add(group)
            group._add_argparse_args(parser)
            groups.extend(group.__subclasses__())
    return frozenset(flag for action in parser._actions for flag in action.option_strings)


def load_features(parser: argparse.ArgumentParser, path: str) -> Features:
    """The features in a JSON file (as `Features.to_dict` writes); exits with a message if invalid."""
    try:
        return Features.from_json(fs.read_bytes(path).decode("utf-8"))
    except FileNotFoundError:
        parser.error(f"--features: {path} does not exist")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, FeatureError) as error:
        parser.error(f"--features: {path} is not a valid features file ({error}); "
                     "write it with json.dump(features.to_dict(), file)")


def input_uri(path: str) -> str:
    """A path or pattern workers can use: local paths (file:// ones too) made absolute, other URIs as they are."""
    return os.path.abspath(fs.local_path(path)) if fs.is_local(path) else path


def input_files(parser: argparse.ArgumentParser, pattern: str) -> list[str]:
    """The files matching `--input` (a path or glob, local or a URI), sorted; exits with a message when none does."""
    uri = input_uri(pattern)
    if fs.is_local(uri) and os.path.isdir(fs.local_path(uri)):
        parser.error(f"--input {pattern} is a folder; give a file or a glob of files, like {fs.join(pattern, '*')}")
    files = sorted(path for path in folders.list_files([uri])
                   if not (fs.is_local(path) and os.path.isdir(fs.local_path(path))))
    if not files:
        parser.error(f"--input: no file matches {pattern}")
    return files


class _CheckFn(beam.DoFn):
    """Turns `(where, example)` pairs into what the sink takes: an input that could not be
    parsed fails the pipeline or goes to the bad output; `Rows` that fit the features go
    on encoded (else their rows one by one); examples go on as they are, for the sink to
    encode once. With a `tally` folder, the rows read are counted there (`progress.Tally`)."""

    def __init__(self, features: Features, skip_bad: bool, tally: str | None = None):
        self._features = features
        self._skip_bad = skip_bad
        self._tally_folder = tally
        self._tally: Tally | None = None
        self._bad = Metrics.counter(counters.NAMESPACE, counters.BAD_INPUTS)

    def setup(self):
        if self._tally_folder is not None:
            self._tally = Tally(self._tally_folder)

    def finish_bundle(self):
        if self._tally is not None:
            self._tally.flush()

    def process(self, element: tuple[Where, Any]):
        if self._tally is not None:
            example = element[1]
            self._tally.add(example.table.num_rows if isinstance(example, Rows) else 1)
        yield from self._check(element)

    def _check(self, element: tuple[Where, Any]):
        where, example = element
        if isinstance(example, Rows):
            table, rows = self._features.encode_batch_or_rows(example.table, where, example.one_by_one)
            if table is not None:
                yield where, EncodedRows(table)
            for item in rows:
                yield from self._check(item)
            return
        if not isinstance(example, Malformed):
            yield element
            return
        error = BadInputError(f"{where}: {example.reason}")
        if not self._skip_bad:
            raise error
        self._bad.inc()
        yield TaggedOutput(_BAD, _bad_input(where, error))


def _bad_input(where: Where, error: Exception) -> tuple[Where, dict[str, Any]]:
    """A line of the bad-inputs list, after its key (the list is in input order)."""
    return where, {"input": str(where), "error": str(error)}


def _record_bad_inputs(records: list[tuple[Where, dict[str, Any]]], path: str, manifest: Manifest) -> None:
    write_bad_inputs(path, manifest.write_id, [record for _, record in sorted(records, key=lambda item: item[0])])


def write_cache(examples: beam.PCollection, args: argparse.Namespace, features: Features,
                metadata: dict[str, Any], write_id: str | None = None, tally: str | None = None) -> beam.PCollection:
    """Writes `(where, example)` pairs into the cache at `args.output`, checked against `features`.

    An example may be a `Rows` of several. Each is fully read before the sink sees it,
    and encoded once (by the sink, or for `Rows` here), so the published cache never
    holds part of one. With `args.skip_bad`, inputs that cannot be parsed and examples
    the sink refuses (its dead letters, `on_bad="skip"`) are left out and listed beside
    the cache once it is published. `write_id` is the sink's (a fresh one by default);
    `tally` a local folder where the rows read are counted for a `progress.Watch`.
    Returns the PCollection holding the published `Manifest`.
    """
    checked = examples | "Check" >> beam.ParDo(_CheckFn(features, args.skip_bad, tally)).with_outputs(
        _BAD, main="examples")
    written = checked.examples | "WriteToArrowShards" >> WriteToArrowShards(
        args.output, features, shard_size_bytes=args.shard_size, batch_size=args.batch_size,
        compression=args.compression, metadata=metadata, mode=args.mode, write_id=write_id,
        on_bad="skip" if args.skip_bad else "fail", allow_empty=args.allow_empty, deterministic=args.deterministic)
    if not args.skip_bad:
        return written
    refused = written.bad | "BadExamples" >> beam.Map(lambda letter: _bad_input(letter["key"], letter["reason"]))
    _ = ((checked[_BAD], refused) | "AllBadInputs" >> beam.Flatten()
         | "CollectBadInputs" >> beam.combiners.ToList()
         | "ListBadInputs" >> beam.Map(_record_bad_inputs, args.output, AsSingleton(written.manifest)))
    return written.manifest


def run_pipeline(options: PipelineOptions, args: argparse.Namespace,
                 read: Callable[[beam.Pipeline], beam.PCollection], features: Features,
                 metadata: dict[str, Any]) -> Manifest:
    """Runs `read` (which adds the steps making `(where, example)` pairs) into `write_cache`.

    Returns the manifest published at `args.output`. When the pipeline fails, what its
    bundles staged is removed before the error is raised again, so a failed conversion
    leaves nothing behind but the previous cache. Beam's log and what its workers print
    are kept out of the output unless `args.verbose` (see `beam_shards.beam.noise`); when
    the workers run on this machine, a progress line is printed every `args.progress`.
    """
    write_id = new_write_id()
    local = workers_on_this_machine(options)
    interval = args.progress.total_seconds() if local else 0
    try:
        with (Watch(args.output, write_id, interval=interval) as watch, quiet_beam(args.verbose),
              beam.Pipeline(options=options) as pipeline):
            write_cache(read(pipeline), args, features, metadata, write_id, watch.folder if local else None)
    except Exception as error:
        # Not on KeyboardInterrupt: a remote job may still be running and using its staging.
        with best_effort(f"remove the files of failed write {write_id}", args.output):
            abandon(args.output, write_id)
        if isinstance(error, EncodeError):  # the sink refused an example: a bad input, as --skip_bad says
            raise BadInputError(str(error)) from None
        raise
    return find_published(args.output, write_id) or read_metadata(args.output)


def report(manifest: Manifest, seconds: float | None = None) -> str:
    """What a pipeline prints when done (in `seconds`): where the cache is and how to open it."""
    path = manifest.path
    rows = "row" if manifest.num_rows == 1 else "rows"
    lines = [f"Wrote {manifest.num_rows:,} {rows} in {manifest.num_shards} shard(s), "
             f"{human_size(manifest.num_bytes)}, to {path} as version {manifest.version} ({manifest.mode})"]
    if seconds is not None:
        lines[0] += f" in {seconds:,.1f}s ({manifest.num_rows / max(seconds, 1e-9):,.0f} rows/s)"
    skipped = read_bad_inputs(path)
    if skipped:
        lines.append(f"Skipped {len(skipped)} bad input(s), listed in {bad_inputs_path(path)}")
    lines += [
        "Look at it:",
        f"  beam-shards info {path}",
        f"  beam-shards log {path}",
        f"  beam-shards show {path} --out grid.png",
        "Read it in Python:",
        "  from beam_shards import ShardedDataset",
        f"  ds = ShardedDataset({path!r}); print(len(ds), ds[0])",
    ]
    return "\n".join(lines)


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
    print(report(manifest, time.monotonic() - start))
    return 0


def _print_error(message: str, bad_input: bool, verbose: bool) -> int:
    if verbose:
        traceback.print_exc()
    print(f"error: {message}", file=sys.stderr)
    if bad_input:
        print("(add --skip_bad to skip bad inputs and list them beside the cache)", file=sys.stderr)
    return 1


def run_script(module_name: str) -> None:
    """`python -m pipelines.NAME`: runs that module's `run` with the process arguments, then exits.

    The module is imported by its name rather than used as `__main__`, so the
    functions Beam pickles are referenced by a name workers can import too.
    """
    module = importlib.import_module(module_name)
    raise SystemExit(main(module.run))
