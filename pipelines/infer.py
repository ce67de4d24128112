"""`beam-shards infer INPUT`: the features a pipeline would convert INPUT with, as a `--features` file.

    beam-shards infer data/train.csv > features.json
    python -m pipelines.infer data/train.jsonl --label_column label

The same inference the pipeline runs (over every row, or the first `--infer_rows`),
here in this process, converting nothing. The columns whose values had to widen (ints
and floats, numbers and text) are named on stderr. `beam-shards` is this module's
`main`: the package's own commands, and `infer`, added through `cli.add_command`
(the package never imports the pipelines).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from beam_shards.cli import add_command, main as cli_main
from beam_shards.units import count_flag
from pipelines import classes
from pipelines.opening import COMPRESSED

FORMATS = ("csv", "jsonl", "parquet", "tfrecord")
_DESCRIPTION = ("Print the features python -m pipelines.FORMAT would convert INPUT with (inferred from every row, or "
                "the first --infer_rows), as JSON to give as --features; converts nothing.")
_SUFFIXES = {".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
             ".parquet": "parquet", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord"}


def add_infer_command(commands: argparse._SubParsersAction) -> None:
    """Adds `infer` to the commands of `beam-shards`."""
    _add_arguments(commands.add_parser(
        "infer", help="print the features a pipeline would convert INPUT with, as a --features file",
        description=_DESCRIPTION))


def build_parser() -> argparse.ArgumentParser:
    """The parser of `python -m pipelines.infer` (the flags of `beam-shards infer`)."""
    parser = argparse.ArgumentParser(prog="python -m pipelines.infer", description=_DESCRIPTION)
    _add_arguments(parser)
    return parser


def _add_arguments(infer: argparse.ArgumentParser) -> None:
    infer.add_argument("input", metavar="INPUT", help="an input file or a glob pattern of several")
    infer.add_argument("--format", choices=FORMATS, help="the input's format (default: by the file name's extension)")
    infer.add_argument("--infer_rows", type=count_flag, metavar="N", help="only the first N rows (default: every row)")
    infer.add_argument("--label_column", metavar="NAME", help="a column of class names or ids, made a ClassLabel")
    infer.add_argument("--image_column", action="append", metavar="NAME",
                       help="a column of image paths (csv, jsonl); '' for none (default: image, when it holds paths)")
    infer.add_argument("--na_values", nargs="+", metavar="TOKEN", help="the CSV cells that are null (see pipelines.csv)")
    infer.add_argument("--classes", metavar="A,B,C", help="the label's class names, in id order")
    infer.add_argument("--classes_from", metavar="CACHE", help="take the label's class names from another cache")
    # As a fresh write (not an append) with bad inputs refused: what a pipeline's defaults infer.
    infer.set_defaults(run=_infer, parser=infer, mode="overwrite", output=None, skip_bad=False)


def _format_of(path: str) -> str | None:
    name = path.lower()
    for compressed in COMPRESSED:
        name = name.removesuffix(compressed)
    return next((fmt for suffix, fmt in _SUFFIXES.items() if name.endswith(suffix)), None)


def _infer(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    fmt = args.format or _format_of(args.input)
    if fmt is None:
        parser.error(f"cannot tell the format of {args.input} by its name: give --format ({', '.join(FORMATS)})")
    from pipelines import common  # Beam and the pipelines load only for this command

    try:
        classes.resolve_class_flags(args)
    except ValueError as error:
        parser.error(str(error))
    files = common.input_files(parser, args.input)
    widened: list[str] = []
    with common.inferring(parser, files):
        if fmt in ("csv", "jsonl"):
            features, widened = _tabular_features(fmt, files, args)
        elif fmt == "parquet":
            from pipelines import parquet

            features = parquet.infer_features(parquet.read_schema(files[0]), where=files[0])
        else:
            features = _tfrecord_features(args)
    print(json.dumps(features.to_dict(), indent=2))
    for line in widened:
        print(f"Widened column {line}", file=sys.stderr)
    return 0


def _tabular_features(fmt: str, files: list[str], args: argparse.Namespace):
    from pipelines import csv, jsonl, tabular

    tabular_format = (csv if fmt == "csv" else jsonl).FORMAT
    summarize = tabular.summarizer_of(tabular_format, args)
    summary = tabular.summary_of_files(tabular_format, files, summarize, args.infer_rows)
    return tabular.features_of_summary(summary, tabular_format, files, summarize)


def _tfrecord_features(args: argparse.Namespace):
    from pipelines import tfrecord, tfrecord_io

    parser = tfrecord.build_parser()
    flags = ["--input", args.input, "--output", "unused"]
    if args.label_column:
        flags += ["--label_column", args.label_column]
    if args.infer_rows:
        flags += ["--infer_rows", str(args.infer_rows)]
    tf_args, _ = parser.parse_known_args(flags)
    return tfrecord._plain_input(parser, tf_args, tfrecord_io.COMPRESSIONS[tf_args.input_compression])[1]


def main(argv: Sequence[str] | None = None) -> int:
    """`beam-shards` with the `infer` command: what the console script runs."""
    add_command(add_infer_command)
    return cli_main(argv)


if __name__ == "__main__":
    raise SystemExit(main(["infer", *sys.argv[1:]]))
