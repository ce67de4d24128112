"""`beam-shards`: look at, check and clean a cache from the shell.

    beam-shards info PATH [--version N]       what the cache holds, and the count per class
    beam-shards log PATH [--limit N]          the versions kept, newest first: number, write id, time, rows...
    beam-shards verify PATH [--version N]     check every shard against the manifest
    beam-shards head PATH [-n 5] [--columns image label] [--version N]
    beam-shards show PATH --out grid.png [-n 64] [--across 8] [--version N]
    beam-shards gc PATH [--keep K] [--min_age 7d] [--dry_run]   retention, and what killed writes left
    beam-shards compact PATH [--shard_size 128MB]   merge small shards into a new version
    beam-shards dedup PATH [--columns A B]   drop exact duplicate rows, as a new version

Exit status: 0 when all is well, 1 when the cache has a problem, 2 for a usage error
or a path that is not a cache.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from beam_shards._version import __version__
from beam_shards.cli.class_counts import class_counts, count_lines, label_feature
from beam_shards.cli.contact_sheet import CAPTION_HEIGHT, contact_sheet
from beam_shards.display import human_size, printable
from beam_shards.errors import BeamShardsError, CacheNotFoundError, FeatureError
from beam_shards.features import ClassLabel, Feature, Image
from beam_shards.format.catalog import read_metadata, version_log
from beam_shards.format.manifest import Manifest
from beam_shards.shards.options import DEFAULT_SHARD_SIZE_BYTES
from beam_shards.terminal import ArgumentParser, print_error, quiet_broken_pipe, say
from beam_shards.units import count_flag, duration_flag, size_flag
from beam_shards.versions.bad_inputs import bad_inputs_path, read_bad_inputs
from beam_shards.versions.compaction import compact
from beam_shards.versions.dedup import deduplicate
from beam_shards.versions.gc import DEFAULT_KEEP, DEFAULT_MIN_AGE, Retention, collect_garbage, find_garbage

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2
# Commands added from outside the package (`infer` lives with the pipelines), each adding its subparser.
_ADDED_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = []


def add_command(add: Callable[[argparse._SubParsersAction], None]) -> None:
    """Makes `beam-shards` take one more command: `add(commands)` adds its subparser, with a
    `run(args) -> exit status` default, to the parser's commands."""
    if add not in _ADDED_COMMANDS:
        _ADDED_COMMANDS.append(add)


class UsageError(BeamShardsError):
    """A command cannot do what it was asked on this cache (exit status 2)."""


# info -----------------------------------------------------------------------------

def _statistics_lines(manifest: Manifest, width: int) -> list[str]:
    """`info`'s lines of per-column statistics: rows and nulls, the items of list columns, and min and
    max of numeric values."""
    if manifest.statistics is None:
        return ["statistics   not recorded (a version of format 1 or 2, or an append onto one)"]
    lines = ["statistics"]
    for name, stats in manifest.statistics.columns.items():
        line = f"  {name:<{width}}  {stats.rows:,} rows, {stats.nulls:,} null"
        if stats.items is not None:
            line += f", {stats.items:,} items"
        if stats.min is not None:
            line += f", min {stats.min!r}, max {stats.max!r}"
        lines.append(line)
    return lines


_COLUMN_TYPES = {"hf": "columns in Hugging Face's types",
                 "large": "columns with 64-bit offsets (HF's loader sees large_string and LargeList; write it anew "
                          "for HF's types)"}


def _info(args: argparse.Namespace) -> int:
    manifest = read_metadata(args.path, version=args.version)
    rows = manifest.num_rows
    per_row = f", {human_size(manifest.num_bytes / rows)} per row" if rows else ""
    writer = manifest.writer.get("package", "?") + "".join(
        f", {key} {manifest.writer[key]}" for key in ("pyarrow", "apache_beam", "python") if key in manifest.writer)
    lines = [
        f"cache        {manifest.path}",
        f"rows         {rows:,}",
        f"shards       {manifest.num_shards:,} ({human_size(manifest.num_bytes)} on disk{per_row})",
        f"compression  {manifest.compression or 'none'}",
        f"format       {manifest.format_version}, " + _COLUMN_TYPES[manifest.column_types],
        f"version      {manifest.version} ({manifest.mode}"
        + (f" over version {manifest.parent_version})" if manifest.parent_version else ")"),
        f"write id     {manifest.write_id}" + (f" (published {manifest.created})" if manifest.created else ""),
        f"written by   {writer}",
    ]
    if manifest.metadata:
        lines.append(f"metadata     {json.dumps(manifest.metadata, ensure_ascii=False)}")
    width = max(len(name) for name in manifest.features) if manifest.features else 0
    lines.append("features")
    lines += [f"  {name:<{width}}  {feature!r}" for name, feature in manifest.features.items()]
    lines += _statistics_lines(manifest, width)
    for name, counts in class_counts(manifest).items():
        lines.append(f"{name}: count per class")
        lines += count_lines(label_feature(manifest.features[name]), counts)
    skipped = read_bad_inputs(args.path)
    if skipped:
        stale = {record.get("write_id") for record in skipped} != {manifest.write_id}
        lines.append(f"bad inputs   {len(skipped):,} skipped, listed in {bad_inputs_path(args.path)}"
                     + (" (by another write than the published one)" if stale else ""))
    say(*lines)
    return EXIT_OK


# verify ---------------------------------------------------------------------------

def _verify(args: argparse.Namespace) -> int:
    from beam_shards.progress import Progress
    from beam_shards.versions.verification import verify

    meter = Progress(f"verify {args.path}", unit="shards", enabled=True if args.progress else None)

    def on_shard(done: int, total: int) -> None:
        meter.update(extra=f"{done:,}/{total:,} ({100 * done / total:.0f}%)")

    report = verify(args.path, version=args.version, on_shard=on_shard)
    meter.finish()
    for problem in report.problems:
        say(f"problem: {problem}")
    manifest = report.manifest
    if report.ok:
        say(f"OK: {report.shards_checked:,} shard(s), {manifest.num_rows:,} rows, "
              f"{human_size(manifest.num_bytes)} match the manifest")
        return EXIT_OK
    say(f"FAILED: {len(report.problems)} problem(s) in the cache at {args.path}")
    return EXIT_PROBLEM


# head -----------------------------------------------------------------------------

def _columns(values: Sequence[str] | None) -> list[str] | None:
    return [name for value in values for name in value.split(",") if name] if values else None


def _open_dataset(path: str, columns: list[str] | None, version: int | None):
    from beam_shards.read.dataset import ShardedDataset

    try:
        return ShardedDataset(path, version=version, columns=columns, image_mode="bytes")
    except KeyError as error:
        raise UsageError(error.args[0]) from None


def _head(args: argparse.Namespace) -> int:
    dataset = _open_dataset(args.path, _columns(args.columns), args.version)
    features = dataset.features
    count = min(args.n, len(dataset))
    rows = dataset.__getitems__(list(range(count)))
    for index, row in enumerate(rows):
        width = max(len(name) for name in row) if row else 0
        say(f"row {index}")
        for name, value in row.items():
            say(f"  {name:<{width}}  {features[name].describe(value)}")
    say(f"({count:,} of {len(dataset):,} rows)")
    return EXIT_OK


# show -----------------------------------------------------------------------------

def _show(args: argparse.Namespace) -> int:
    manifest = read_metadata(args.path, version=args.version)
    features = manifest.features
    images = [name for name, feature in features.items() if isinstance(feature, Image)]
    image_column = args.image or (images[0] if images else None)
    if image_column is None or not isinstance(features.get(image_column), Image):
        raise UsageError(f"the cache at {args.path} has no Image column{' ' + repr(args.image) if args.image else ''}"
                         f" (its columns: {', '.join(features)})")
    labels = [name for name, feature in features.items() if isinstance(feature, ClassLabel)]
    label_column = args.label or (labels[0] if labels else None)
    if label_column is not None and label_column not in features:
        raise UsageError(f"the cache at {args.path} has no column {label_column!r} (its columns: {', '.join(features)})")
    dataset = _open_dataset(args.path, [image_column] + ([label_column] if label_column else []), manifest.version)
    count = min(args.n, len(dataset))
    if count == 0:
        raise UsageError(f"the cache at {args.path} has no rows to show")
    # A seeded sample: the same sheet each time, and no aliasing with periodic row orders.
    indices = np.sort(np.random.default_rng(0).choice(len(dataset), size=count, replace=False))
    rows = dataset.__getitems__(indices)
    captions = [f"{index}" + (f" {_caption(row[label_column], features[label_column])}" if label_column else "")
                for index, row in zip(indices.tolist(), rows)]
    sheet = contact_sheet([row[image_column] for row in rows], captions, args.tile, args.across)
    try:
        sheet.save(args.out, format="PNG")
    except OSError as error:
        raise UsageError(f"cannot write {args.out}: {error}") from None
    say(f"wrote {args.out}: {count} image(s) of {len(dataset):,}, {sheet.width}x{sheet.height} pixels")
    return EXIT_OK


def _caption(value: Any, feature: Feature) -> str:
    if isinstance(feature, ClassLabel) and value is not None and 0 <= value < feature.num_classes:
        return printable(feature.int2str(value))
    return printable(str(value))


# gc -------------------------------------------------------------------------------

def _log(args: argparse.Namespace) -> int:
    versions, ignored = version_log(args.path, args.limit)
    say(f"{'version':>7}  {'write id':<25}  {'created':<29}  {'rows':>12}  {'shards':>7}  mode")
    for manifest in reversed(versions):
        say(f"{manifest.version:>7}  {manifest.write_id:<25}  {manifest.created or '?':<29}  "
              f"{manifest.num_rows:>12,}  {manifest.num_shards:>7,}  {manifest.mode}")
    _say_ignored(ignored)
    return EXIT_OK


def _say_ignored(ignored: dict[str, str]) -> None:
    for name, why in ignored.items():
        say(f"ignored {name}: {why}")


def _gc(args: argparse.Namespace) -> int:
    retention = Retention(keep=args.keep, min_age=args.min_age)
    garbage = (find_garbage if args.dry_run else collect_garbage)(args.path, retention)
    if not garbage.published:
        say(f"no cache is published at {args.path}; these are files of writes that never finished")
    if garbage.removed_versions:
        say(f"versions removed by retention ({retention}): {', '.join(map(str, garbage.removed_versions))}")
    for name, size in sorted(garbage.files.items()):
        say(f"  {name}  ({human_size(size)}): {garbage.reasons[name]}")
    _say_ignored(garbage.ignored)
    total = f"{len(garbage.files):,} file(s), {human_size(garbage.num_bytes)}"
    if not garbage.files:
        say(f"nothing to remove in {args.path} (versions kept: {', '.join(map(str, garbage.kept_versions))})")
    else:
        say(f"dry run: would remove {total}" if args.dry_run else f"removed {total}")
    return EXIT_OK


def _compact(args: argparse.Namespace) -> int:
    old, new = compact(args.path, args.shard_size)
    if new is None:
        say(f"nothing to compact in {args.path}: version {old.version} has {old.num_shards:,} shard(s) and no two "
            f"of them fit together under {human_size(args.shard_size)}")
        return EXIT_OK
    say(f"compacted version {old.version} ({old.num_shards:,} shards) into version {new.version} "
        f"({new.num_shards:,} shards, {human_size(new.num_bytes)}, {new.num_rows:,} rows); "
        f"version {old.version} stays until retention (`beam-shards gc`) removes it")
    return EXIT_OK


def _dedup(args: argparse.Namespace) -> int:
    try:
        old, new, dropped = deduplicate(args.path, args.columns, args.shard_size)
    except FeatureError as error:
        raise UsageError(str(error)) from None
    by = "whole rows" if args.columns is None else "columns " + ", ".join(args.columns)
    if new is None:
        say(f"no duplicate rows in version {old.version} of {args.path} (by {by}); nothing published")
        return EXIT_OK
    say(f"dropped {dropped:,} duplicate row(s) of {old.num_rows:,} (by {by}) from version {old.version}: version "
        f"{new.version} holds {new.num_rows:,} rows in {new.num_shards:,} shard(s), {human_size(new.num_bytes)}; "
        f"version {old.version} stays until retention (`beam-shards gc`) removes it")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="beam-shards", description="Look at, check and clean a beam_shards cache (a folder with _metadata.json).",
        epilog="PATH may be local or any scheme Beam's FileSystems knows (gs://, s3://).")
    parser.add_argument("--version", action="version", version=f"beam-shards {__version__}",
                        help="print the version of beam_shards and exit")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    info = commands.add_parser("info", help="rows, shards, size, features, writer versions and count per class",
                               description="Show what the cache at PATH holds: rows, shards, size on disk, features, "
                                           "compression, writer versions, and the count per class of every "
                                           "ClassLabel column (read from that column alone).")
    info.set_defaults(run=_info)

    verify = commands.add_parser("verify", help="check every shard against the manifest; exit 1 on any problem",
                                 description="Check every shard of the cache at PATH against its manifest: present, "
                                             "size, checksum, readable, schema and row count. Prints every problem; "
                                             "the exit status is 0 only when there is none.")
    verify.add_argument("--progress", action="store_true",
                        help="print progress lines even when stderr is not a terminal")
    verify.set_defaults(run=_verify)

    head = commands.add_parser("head", help="print the first rows, decoded",
                               description="Print the first rows of the cache at PATH; images are shown as their "
                                           "format, size and mode.")
    head.add_argument("-n", type=count_flag, default=5, help="how many rows (default 5)")
    head.add_argument("--columns", nargs="+", metavar="NAME", help="only these columns (default: all)")
    head.set_defaults(run=_head)

    show = commands.add_parser("show", help="write a contact sheet of images with their labels (PNG)",
                               description="Write a PNG contact sheet of N images sampled from the cache at "
                                           "PATH (the same sample each time), each captioned with its row and label. Each cell is TILE pixels "
                                           f"wide and TILE+{CAPTION_HEIGHT} high.")
    show.add_argument("--out", required=True, help="the PNG file to write")
    show.add_argument("-n", type=count_flag, default=64, help="how many images (default 64)")
    show.add_argument("--image", metavar="COLUMN", help="the Image column (default: the first)")
    show.add_argument("--label", metavar="COLUMN", help="the column to caption with (default: the first ClassLabel)")
    show.add_argument("--tile", type=count_flag, default=128, help="cell width in pixels (default 128)")
    # --columns was this flag's first name; head's --columns names columns.
    show.add_argument("--across", "--columns", dest="across", type=count_flag, metavar="N",
                      help="cells across (default: about a square)")
    show.set_defaults(run=_show)

    log = commands.add_parser("log", help="list the versions kept, newest first",
                              description="List the versions of the cache at PATH that retention kept, newest "
                                          "first: number, write id, when published, rows, shards and mode.")
    log.add_argument("--limit", "-n", type=count_flag, metavar="N", help="only the newest N versions (default: all)")
    log.set_defaults(run=_log)

    gc = commands.add_parser("gc", help="remove old versions (retention) and what killed writes left behind",
                             description="Apply retention to the cache at PATH: keep the newest K versions, and "
                                         "every version superseded less than MIN_AGE ago; remove the others' "
                                         "manifests and the shards only they list. Also remove what writes that "
                                         "stopped left (staging folders, temporary files, shards no version lists) "
                                         "once they are MIN_AGE old. Files beam_shards does not name are never "
                                         "touched. --min_age 0 removes a killed write's files at once: use it only "
                                         "when no write to PATH is running.")
    gc.add_argument("--keep", type=count_flag, default=DEFAULT_KEEP, metavar="K",
                    help=f"the newest versions always kept (default {DEFAULT_KEEP})")
    gc.add_argument("--min_age", type=duration_flag, default=DEFAULT_MIN_AGE, metavar="DURATION",
                    help="keep versions superseded, and leftovers changed, less than this long ago, like 7d, 12h, "
                         "30m or 0 (default 7d)")
    gc.add_argument("--dry_run", "--dry-run", action="store_true", help="list what would be removed, remove nothing")
    gc.set_defaults(run=_gc)

    compact_ = commands.add_parser(
        "compact", help="merge small shards into shards near the target size, as a new version",
        description="Merge the shards of the latest version at PATH that are under half of SIZE into shards of "
                    "about SIZE by copying their record batches (rows keep their order), and publish the result as "
                    "a new version; the old version stays readable until retention removes it.")
    compact_.add_argument("--shard_size", type=size_flag, default=DEFAULT_SHARD_SIZE_BYTES, metavar="SIZE",
                          help="target shard size, like 128MB (10^6 bytes), 128MiB (2^20) or 200KB (default 128MB)")
    compact_.set_defaults(run=_compact)

    dedup = commands.add_parser(
        "dedup", help="drop exact duplicate rows, as a new version",
        description="Publish the latest version at PATH without its exact duplicate rows (the same stored values of "
                    "every column, or of the --columns named), keeping the first of each in row order, as a new "
                    "version; features, compression and metadata are kept and the count dropped is added to the "
                    "metadata. Nothing is published when no row is a duplicate.")
    dedup.add_argument("--columns", nargs="+", metavar="COLUMN", help="compare rows by these columns alone")
    dedup.add_argument("--shard_size", type=size_flag, default=DEFAULT_SHARD_SIZE_BYTES, metavar="SIZE",
                       help="target shard size of the new version (default 128MB)")
    dedup.set_defaults(run=_dedup)

    for add in _ADDED_COMMANDS:
        add(commands)
    for command in (info, verify, head, show):
        command.add_argument("--version", type=count_flag, metavar="N", help="the version to read (default: the latest)")
    for command in (info, log, verify, head, show, gc, compact_, dedup):
        command.add_argument("path", metavar="PATH", help="the cache folder")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs `beam-shards` with `argv` (the process arguments by default); returns the exit status
    (`BROKEN_PIPE_STATUS`, quietly, when the reader of its output stops early)."""
    return quiet_broken_pipe(lambda: _run(argv))


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (CacheNotFoundError, UsageError) as error:
        print_error("beam-shards", str(error))
        return EXIT_USAGE
    except BeamShardsError as error:
        print_error("beam-shards", str(error))
        return EXIT_PROBLEM


if __name__ == "__main__":
    raise SystemExit(main())
