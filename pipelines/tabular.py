"""What the `jsonl` and `csv` pipelines share: one row per example in index files.

A row holds text, numbers, bools, lists and nested objects, and image columns holding
paths (relative to the index file, absolute, or a URI). Features are given as a JSON
file or inferred from the first rows; `--label_column` makes one column a ClassLabel
whose classes are read from every row. Index files are read whole by one worker each (they hold
paths, not images); the rows are then spread out, so images are read in parallel.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import io
import os
import posixpath
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, BinaryIO

import apache_beam as beam

from beam_shards import Feature, FeatureError, Features, Image, Manifest, Sequence as SequenceFeature, Struct, Value
from beam_shards.display import few
from beam_shards.storage import fs
from beam_shards.units import count_flag
from pipelines import common
from pipelines.where import Where

# A format reads (line number, raw row or Malformed) from a file, and turns a raw row
# into an example for given features (raising ValueError).
ReadRows = Callable[[BinaryIO], Iterator[tuple[int, Any]]]
ToExample = Callable[[Any, Features], dict[str, Any]]
DEFAULT_IMAGE_COLUMN = "image"


class TabularFormat:
    """How one index file format is read: `jsonl` and `csv` each make one.

    Example:
        >>> import io, json
        >>> def read_rows(handle):
        ...     for number, line in enumerate(handle, start=1):
        ...         yield number, json.loads(line)
        >>> fmt = TabularFormat("jsonl", read_rows, lambda row, features: row)
        >>> list(fmt.read_rows(io.BytesIO(b'{"image": "a.jpg"}')))
        [(1, {'image': 'a.jpg'})]

    Args:
      name: the pipeline name, as in `python -m pipelines.NAME`.
      read_rows: yields `(line number, raw row)` from a binary stream; a raw row that
        cannot be parsed is a `common.Malformed`.
      to_example: a raw row and the features to the example dict; raises ValueError
        naming the column when a value cannot be read.
      infer_value: a raw value to the Python value inference looks at.
      description: the pipeline's one-line `--help` description.
      example_file: an input file name for the help's examples.
    """

    def __init__(self, name: str, read_rows: ReadRows, to_example: ToExample,
                 infer_value: Callable[[Any], Any] = lambda value: value, *,
                 description: str = "", example_file: str = "data/train"):
        self.name = name
        self.read_rows = read_rows
        self.to_example = to_example
        self.infer_value = infer_value
        self.description = description
        self.example_file = example_file

    def empty_hint(self, files: list[str]) -> str:
        """What to say when `files` hold no row at all."""
        if len(files) > 1:
            return f"none of the {len(files)} input files ({files[0]}, ...) holds a row"
        with open_input(files[0]) as handle:
            empty = not handle.read(1 << 16).strip()
        return f"{files[0]} is empty" if empty else f"{files[0]} holds no row after its header"

    def build_parser(self) -> argparse.ArgumentParser:
        """The pipeline's command-line parser (its `--help`)."""
        return build_parser(self, self.description, self.example_file)

    def run(self, argv: Sequence[str] | None = None) -> Manifest:
        """Runs the pipeline with command-line flags `argv`; returns the published manifest."""
        return run(self, self.build_parser(), argv)

    def __repr__(self) -> str:
        return f"TabularFormat({self.name!r})"


def resolve_paths(value: Any, feature: Feature, base: str) -> Any:
    """Image and video paths in `value` made relative to the folder `base` (URIs and
    absolute paths kept); other values unchanged."""
    return feature.map_paths(value, lambda path: _resolve(path, base))


def _resolve(path: str, base: str) -> str:
    if "://" in path or os.path.isabs(path) or not path:
        return path
    return fs.join(base, path)


def parent(path: str) -> str:
    """The folder of a file path or URI."""
    return os.path.dirname(path) if fs.is_local(path) else posixpath.dirname(path)


def infer_feature(path: str, values: list[Any]) -> Feature:
    """The feature of the values found at `path` (a column, a field of one, or the items of
    lists), nullable at every level: bools, ints (int64), numbers (float64), strings,
    lists (a Sequence of what their items hold) and objects (a Struct of the union of
    their keys).

    Raises:
      FeatureError: values of kinds no one feature holds (ints and strings, lists and
        numbers...), naming where.
    """
    present = [value for value in values if value is not None]
    kinds = {type(value) for value in present}
    if not present or kinds == {str}:
        return Value("string", nullable=True)  # a column null in every row looked at is most often text
    if kinds == {bool}:
        return Value("bool", nullable=True)
    if kinds == {int}:
        return Value("int64", nullable=True)
    if kinds <= {int, float}:
        return Value("float64", nullable=True)
    if kinds == {list}:
        items = [item for value in present for item in value]
        return SequenceFeature(infer_feature(f"{path}[]", items) if items else Value("float64", nullable=True),
                               nullable=True)
    if kinds == {dict}:
        keys = list(dict.fromkeys(key for value in present for key in value))
        if not keys:
            raise FeatureError(f"{path!r} holds only empty objects: declare its feature in a --features file")
        return Struct({key: infer_feature(f"{path}.{key}", [value.get(key) for value in present]) for key in keys},
                      nullable=True)
    names = ", ".join(sorted(kind.__name__ for kind in kinds))
    raise FeatureError(f"{path!r} holds {names} values: cannot infer one type for it; "
                       "declare its feature in a --features file")


def holds_image_paths(values: Iterable[Any]) -> bool:
    """Whether every value that is there is a path or URI of an image file (and one is there)."""
    present = [value for value in values if value is not None]
    return bool(present) and all(isinstance(value, str) and value.lower().endswith(common.IMAGE_EXTENSIONS)
                                 for value in present)


def infer_features(rows: Sequence[dict[str, Any]], *, image_columns: Sequence[str] | None = None,
                   label_column: str | None = None, label_values: Iterable[Any] = ()) -> Features:
    """Features for index rows: Images for `image_columns`, a ClassLabel for `label_column`
    (classes from `label_values`), and `infer_feature` for the rest.

    `image_columns` None means the column named `image` when there is one that holds
    image paths, and none otherwise. Images and the label are nullable only where a
    row lacks them (a missing image is most often a mistake in the index); every other
    column is nullable, since inference sees only the first rows and a null after them
    would otherwise fail the conversion.

    Raises:
      FeatureError: no rows, a named column missing, or a column inference cannot type.
    """
    if not rows:
        raise FeatureError("the input has no rows to infer features from; give --features")  # see _parsed_rows
    columns = list(dict.fromkeys(name for row in rows for name in row))
    if image_columns is None:
        image_columns = [name for name in (DEFAULT_IMAGE_COLUMN,)
                         if name in columns and holds_image_paths(row.get(name) for row in rows)]
    for name in list(image_columns) + ([label_column] if label_column else []):
        if name not in columns:
            raise FeatureError(f"column {name!r} is not in the input (its columns: {few(columns)})")
    features: dict[str, Feature] = {}
    for column in columns:
        values = [row.get(column) for row in rows]
        nullable = any(value is None for value in values)
        if column in image_columns:
            features[column] = Image(nullable=nullable)
        elif column == label_column:
            features[column] = common.class_label_of_values(column, label_values, nullable)
        else:
            features[column] = infer_feature(column, values)
    return Features(features)


def add_flags(parser: argparse.ArgumentParser, example_file: str) -> None:
    """The flags of an index-file pipeline besides the common ones."""
    parser.add_argument("--input", required=True, metavar="PATTERN",
                        help=f"the index file (CSV or JSON Lines), or a glob pattern of several (local, gs://...), like {example_file}")
    parser.add_argument("--features", metavar="FILE",
                        help="a JSON file of the features (as Features.to_dict() gives); inferred when left out")
    parser.add_argument("--image_column", action="append", metavar="NAME",
                        help="a column of image paths; repeat it for several, or give '' for none (default: the "
                             "column named image, when it holds image paths)")
    parser.add_argument("--label_column", metavar="NAME",
                        help="a column of class names or ids, stored as a ClassLabel with the classes of all rows")
    parser.add_argument("--infer_rows", type=count_flag, default=100, metavar="N",
                        help="how many rows type inference looks at (default 100)")


class _ReadIndexFileFn(beam.DoFn):
    """Reads one index file into `(where, example or Malformed)` pairs."""

    def __init__(self, tabular: TabularFormat, features: Features):
        self._format = tabular
        self._features = features

    def process(self, path: str) -> Iterator[tuple[Where, Any]]:
        base = parent(path)
        with open_input(path) as handle:
            for line, raw in self._format.read_rows(handle):
                where = Where.at(path, line, "line")
                if isinstance(raw, common.Malformed):
                    yield where, raw
                    continue
                try:
                    example = self._format.to_example(raw, self._features)
                except ValueError as error:
                    yield where, common.Malformed(str(error))
                    continue
                yield where, {name: resolve_paths(value, self._features[name], base) if name in self._features
                              else value for name, value in example.items()}


def open_input(path: str) -> BinaryIO:
    """An index file for reading, decompressed when its name ends in `.gz` or `.zst`.

    Raises:
      FileNotFoundError: no file at `path`. IsADirectoryError: a folder.
    """
    handle = fs.open_read(path)
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=handle, mode="rb")
    if path.endswith(".zst"):
        import pyarrow as pa

        return io.BufferedReader(pa.CompressedInputStream(pa.PythonFile(handle, mode="r"), "zstd"))
    return handle


def _parsed_rows(tabular: TabularFormat, files: list[str]) -> Iterator[dict[str, Any]]:
    """The rows of the index files that parse, with values as inference sees them.

    A row with a value inference cannot read is left out: the pipeline names it. When no
    row of any file parses, the first reason one did not is the FeatureError raised.

    Raises:
      FeatureError: no row parses (naming the first file and line that did not, or the
        files as empty).
    """
    first_problem = None
    for path in files:
        with open_input(path) as handle:
            for line, raw in tabular.read_rows(handle):
                problem = raw.reason if isinstance(raw, common.Malformed) else None
                if problem is None:
                    try:
                        row = {name: tabular.infer_value(value) for name, value in raw.items()}
                    except ValueError as error:
                        problem = str(error)
                    else:
                        first_problem = ""
                        yield row
                        continue
                if first_problem is None:
                    first_problem = f"{path}, line {line}: {problem}"
    if first_problem is None:
        raise FeatureError(f"{tabular.empty_hint(files)}; give --features (with --allow_empty) to publish no rows")
    if first_problem:
        raise FeatureError(f"no row could be read: {first_problem}")


def build_parser(tabular: TabularFormat, description: str, example_file: str) -> argparse.ArgumentParser:
    parser = common.make_parser(tabular.name, description)
    add_flags(parser, example_file)
    return parser


def run(tabular: TabularFormat, parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> Manifest:
    """Runs the index-file pipeline of `tabular` with command-line flags `argv`."""
    args, options = common.parse_args(parser, argv)
    files = common.input_files(parser, args.input)
    # --image_column '' names none; without the flag, `image` if it holds image paths.
    image_columns = None if args.image_column is None else [name for name in args.image_column if name]
    features = common.infer_from_rows(
        parser, args, files, rows=functools.partial(_parsed_rows, tabular, files), label=dict.get,
        infer=lambda first, labels: infer_features(first, image_columns=image_columns, label_column=args.label_column,
                                                   label_values=labels))

    def read(pipeline: beam.Pipeline) -> beam.PCollection:
        return (pipeline
                | "IndexFiles" >> beam.Create(files)
                | "ReadRows" >> beam.ParDo(_ReadIndexFileFn(tabular, features))
                | "Spread" >> beam.Reshuffle())

    return common.run_pipeline(options, args, read, features, {"pipeline": tabular.name, "input": args.input})
