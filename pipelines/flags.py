"""The flags every pipeline takes, and the inputs they name.

A pipeline module builds its parser with `make_parser` (adding its own flags; an
index-file pipeline's parser is `index_file_parser`) and reads the command line with
`parse_args`: every flag it does not know goes to Beam's `PipelineOptions`, but only
when Beam (or the runner `--runner` names) takes it; any other is refused, naming the
nearest known flag. `input_files` and `load_features` read what `--input` and
`--features` name. Building a parser imports no Beam (seconds of a
start-up): `--help` and a malformed flag are answered without it (`command.launch`).
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import functools
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from beam_shards import FeatureError, Features
from beam_shards.format import COMPRESSIONS, MODES
from beam_shards.shards import DEFAULT_BATCH_SIZE, DEFAULT_SHARD_SIZE_BYTES
from beam_shards.storage import folders, fs
from beam_shards.terminal import ArgumentParser, print_error
from beam_shards.units import count_flag, duration_flag, size_flag
from pipelines.classes import resolve_class_flags

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

DEFAULT_RUNNER = "FnApiRunner"
# What --skip_bad skips at most without --max_bad: 1% of the inputs read.
DEFAULT_MAX_BAD = 0.01
# The file extensions of images, as the pipelines recognise them in paths (lower case).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff")

_RUNNER_HELP = """\
Every other flag goes to Beam's PipelineOptions. Without --runner the pipeline runs
locally on the FnApiRunner (add --direct_num_workers=N --direct_running_mode=multi_processing
to use N processes). The same command runs on Dataflow or Flink with their flags, e.g.
  --runner=DataflowRunner --project=PROJECT --region=REGION --temp_location=gs://BUCKET/tmp --setup_file=./setup.py
  --runner=FlinkRunner --flink_master=HOST:PORT --environment_type=LOOPBACK
A local --output needs every worker on this machine (a local runner, or LOOPBACK);
with workers elsewhere write to a shared location such as gs://BUCKET/cache.
"""
_IN_PROCESS_HELP = """\
Given no Beam flag at all, a conversion of local files of 64 MiB or less together into a
local --output runs in this process without starting Beam: the same checks, errors, rows
and shard bytes, in a fraction of the time (in input order, --no_deterministic or not).
Any Beam flag (--runner=FnApiRunner too), --dedup, or larger or remote inputs run it on Beam.
"""


def make_parser(name: str, description: str, *, default_output: str | None = None,
                classes: bool = True) -> argparse.ArgumentParser:
    """The parser of `python -m pipelines.NAME`, with the flags every pipeline takes (and with
    `classes`, those pinning the classes of a ClassLabel it makes)."""
    parser = ArgumentParser(
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
    parser.add_argument("--dedup", nargs="*", metavar="COLUMN",
                        help="drop exact duplicate rows (the same values once encoded): of every column, or of the "
                             "COLUMNs named; the first in input order is kept, and the count is in the summary and "
                             "the version's metadata")
    parser.add_argument("--allow_empty", action="store_true",
                        help="publish a version of no rows when the input holds none, instead of failing")
    parser.add_argument("--progress", type=duration_flag, default=datetime.timedelta(seconds=5), metavar="SECONDS",
                        help="seconds between progress lines when the workers run on this machine (default 5s; "
                             "0 for none)")
    parser.add_argument("--verbose", action="store_true",
                        help="show Beam's log, and the traceback above an error")
    parser.add_argument("--skip_bad", action="store_true",
                        help="skip inputs that cannot be read, up to --max_bad of them (listed in "
                             "OUTPUT/_bad_inputs.jsonl and counted in the summary) instead of failing")
    parser.add_argument("--max_bad", type=max_bad_flag, metavar="N|P%",
                        help=f"the most bad inputs --skip_bad skips: a count, or a percentage of the inputs read "
                             f"(default {DEFAULT_MAX_BAD * 100:g}%%); more fails the run and publishes nothing. "
                             "Given alone it turns --skip_bad on")
    if classes:
        pinned = parser.add_mutually_exclusive_group()
        pinned.add_argument("--classes", metavar="A,B,C",
                            help="the class names of the ClassLabel, in id order, so ids stay the same across splits "
                                 "and versions; a label outside them is an error, or with --skip_bad a bad input")
        pinned.add_argument("--classes_from", metavar="CACHE",
                            help="take the class names of another cache's ClassLabel (the column --label_column "
                                 "names, or its only one); local, gs://, s3://...")
    return parser


def index_file_parser(name: str, description: str, example_file: str, text: bool) -> argparse.ArgumentParser:
    """The parser of an index-file pipeline (csv, jsonl): the common flags and its own; `text`: CSV's cells."""
    parser = make_parser(name, description)
    parser.epilog += _IN_PROCESS_HELP
    parser.add_argument("--input", required=True, metavar="PATTERN",
                        help="the index file (CSV or JSON Lines), or a glob pattern of several (local, gs://...), "
                             f"like {example_file}")
    parser.add_argument("--features", metavar="FILE",
                        help="a JSON file of the features (as Features.to_dict() or beam-shards infer gives); inferred "
                             "when left out")
    parser.add_argument("--image_column", action="append", metavar="NAME",
                        help="a column of image paths; repeat it for several, or give '' for none (default: the "
                             "column named image, when it holds image paths)")
    parser.add_argument("--label_column", metavar="NAME",
                        help="a column of class names or ids, stored as a ClassLabel with the classes of all rows")
    parser.add_argument("--infer_rows", type=count_flag, default=None, metavar="N",
                        help="infer the features from the first N rows only, read before the conversion (default: "
                             "from every row, as the conversion reads them)")
    if text:
        parser.add_argument("--na_values", nargs="+", metavar="TOKEN",
                            help="the cells that are null, instead of pandas' defaults ('', NA, N/A, NaN, null, None, "
                                 "#N/A...); COLUMN=TOKEN gives a column exactly its own tokens (COLUMN= an empty cell)")
    return parser


def dedup_flag(args: argparse.Namespace) -> str | list[str] | None:
    """What `--dedup` gives the sink: None without it, "rows" alone, else its columns."""
    return None if args.dedup is None else args.dedup or "rows"


def check_dedup(args: argparse.Namespace, features: Features) -> None:
    """Exits with a usage error (status 2) when `--dedup` names a column `features` do not have."""
    for name in args.dedup or ():
        if name not in features:
            print_error("error", f"--dedup {name}: the features have no column {name!r}; they have "
                                 f"{', '.join(features)}")
            raise SystemExit(2)


def max_bad_flag(text: str) -> int | float:
    """`--max_bad`: a count of bad inputs (an int), or `P%` of the inputs read (a fraction, a float)."""
    try:
        if text.endswith("%"):
            fraction = float(text[:-1]) / 100
            if not 0 <= fraction <= 1:
                raise ValueError
            return fraction
        count = int(text)
        if count < 0:
            raise ValueError
        return count
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a count (like 10) nor a percentage from 0% to 100% "
                                         "(like 1%)") from None


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> tuple[argparse.Namespace,
                                                                                     PipelineOptions]:
    """This pipeline's flags, and `PipelineOptions` from all the others (FnApiRunner by default)."""
    args, beam_args = read_flags(parser, argv)
    return args, beam_options(parser, args, beam_args)


def read_flags(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """This pipeline's flags, and the others as given, for Beam's `PipelineOptions` (`beam_options`);
    no Beam is imported."""
    args, beam_args = parser.parse_known_args(argv)
    args.compression = None if args.compression == "none" else args.compression
    if args.max_bad is None:
        args.max_bad = DEFAULT_MAX_BAD
    else:
        args.skip_bad = True
    if hasattr(args, "classes_from"):
        try:
            resolve_class_flags(args)
        except ValueError as error:
            parser.error(str(error))
    return args, beam_args


def beam_options(parser: argparse.ArgumentParser, args: argparse.Namespace, beam_args: list[str]) -> PipelineOptions:
    """`PipelineOptions` of the flags `read_flags` left for Beam (FnApiRunner by default); exits with a usage
    error for a runner or flag Beam does not know, or a local `--output` the runner's workers cannot share.

    The runner is resolved first: a runner named by its dotted path is imported, so the
    flags of the options its module defines (DaskRunner's `--dask_client_address`, say)
    are taken like Beam's own.
    """
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    from pipelines.runners import local_output_problem, unknown_runner_problem

    options = PipelineOptions(beam_args)
    standard = options.view_as(StandardOptions)
    if standard.runner is None:
        # Beam's own default, the DirectRunner, would start (and may download) Prism.
        standard.runner = DEFAULT_RUNNER
    problem = unknown_runner_problem(options)
    if problem:
        parser.error(problem)
    unknown = [arg.split("=", 1)[0] for arg in beam_args if arg.startswith("-") and arg.split("=", 1)[0]
               not in _beam_flags()]
    if unknown:
        known = [flag for action in parser._actions for flag in action.option_strings] + sorted(_beam_flags())
        nearest = difflib.get_close_matches(unknown[0], known, n=1, cutoff=0.6)
        parser.error(f"unrecognized argument {unknown[0]}" + (f"; did you mean {nearest[0]}?" if nearest else
                                                               " (not a flag of this pipeline or of Beam)"))
    problem = local_output_problem(args.output, options)
    if problem:
        parser.error(problem)
    return options


def _beam_flags() -> frozenset[str]:
    """Every flag Beam's PipelineOptions takes: its own option groups', and those of every
    subclass imported so far (a dotted runner's module may define some)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    groups, seen = [PipelineOptions], set()
    while groups:
        group = groups.pop()
        if group not in seen:
            seen.add(group)
            groups.extend(group.__subclasses__())
    return _flags_of(frozenset(seen))


@functools.cache
def _flags_of(groups: frozenset[type[PipelineOptions]]) -> frozenset[str]:
    parser = argparse.ArgumentParser(allow_abbrev=False, conflict_handler="resolve")
    for group in groups:
        group._add_argparse_args(parser)
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
