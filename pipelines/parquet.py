"""Parquet files into a cache, such as a dataset exported from the Hugging Face hub, or a
folder Hugging Face's `Dataset.save_to_disk` wrote.

Images stored as a struct of `bytes` and `path` (the Hugging Face layout) become Image
columns; the Hugging Face features in the file's metadata (class names included) are
used when present (`beam_shards.hf` maps them), and otherwise features follow
the Arrow types, structs and lists included. `--label_column` makes a column of class
names or ids a ClassLabel of the classes in all rows. Files are split by
row group, so many workers share one large file, and a row group is read in record
batches of bounded size. A batch whose columns already fit the features goes to the
sink whole; any other is read row by row. Errors name the file and the row.
"""

from __future__ import annotations

import argparse
import functools
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from beam_shards import (Array, ClassLabel, Feature, FeatureError, Features, Image, Manifest,
                         Sequence as SequenceFeature, Struct, Value, Video)
from beam_shards.display import few
from beam_shards.features import NUMERIC_DTYPES, temporal_type
from beam_shards.hf import from_hf_dict, hf_features_of, hf_storage_schema, saved_dataset
from beam_shards.shards import DEFAULT_BATCH_BYTES
from beam_shards.storage import fs
from pipelines import classes, common, nesting, tabular
from pipelines.where import Where

# Column chunks are read through a buffer of this size, page by page, rather than whole.
_READ_BUFFER_BYTES = 1 << 20


def is_image_struct(arrow_type: pa.DataType) -> bool:
    """Whether a column type is an image as Hugging Face stores it: struct<bytes: binary, path: string>."""
    if not pa.types.is_struct(arrow_type):
        return False
    names = {arrow_type.field(i).name for i in range(arrow_type.num_fields)}
    return "bytes" in names and names <= {"bytes", "path"}


def feature_from_arrow(name: str, arrow_type: pa.DataType, nullable: bool = False) -> Feature:
    """The feature of a Parquet column from its Arrow type.

    Raises:
      FeatureError: no feature holds values of this type (a map, an interval...), or it
        nests deeper than `nesting.MAX_DEPTH` levels; names the column and its type, and
        says what works instead.
    """
    nesting.check_arrow_type(name, arrow_type)
    feature = _feature_of_type(arrow_type, nullable)
    if feature is None:
        raise FeatureError(
            f"column {name!r} has Arrow type {arrow_type}, which no feature can hold: leave the column out "
            "with --columns (listing the columns to keep), or cast it upstream to a type that maps "
            "(numbers, bools, strings, binary, dates and times, decimals, lists and structs of them)")
    return feature


def _feature_of_type(arrow_type: pa.DataType, nullable: bool) -> Feature | None:
    if is_image_struct(arrow_type):
        return Image()
    if pa.types.is_dictionary(arrow_type):
        return _feature_of_type(arrow_type.value_type, nullable)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return Value("string", nullable=nullable)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return Value("binary", nullable=nullable)
    if pa.types.is_boolean(arrow_type) or pa.types.is_integer(arrow_type):
        return Value(str(arrow_type), nullable=nullable)
    if pa.types.is_floating(arrow_type):
        return Value(f"float{arrow_type.bit_width}", nullable=nullable)
    if pa.types.is_date(arrow_type):
        return Value("date32" if pa.types.is_date32(arrow_type) else "date64", nullable=nullable)
    if temporal_type(str(arrow_type)) == arrow_type:  # times, timestamps, durations, decimals
        return Value(str(arrow_type), nullable=nullable)
    if pa.types.is_fixed_size_list(arrow_type):
        item = _feature_of_type(arrow_type.value_type, False)
        if isinstance(item, Value) and item.dtype in NUMERIC_DTYPES:
            return Array((arrow_type.list_size,), item.dtype, nullable=nullable)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        item = _feature_of_type(arrow_type.value_type, arrow_type.value_field.nullable)
        return None if item is None else SequenceFeature(item, nullable=nullable)
    if pa.types.is_struct(arrow_type) and arrow_type.num_fields:
        fields = {field.name: _feature_of_type(field.type, field.nullable) for field in arrow_type}
        return None if None in fields.values() else Struct(fields, nullable=nullable)
    return None


def infer_features(schema: pa.Schema, columns: Sequence[str] | None = None, where: str = "a Parquet file") -> Features:
    """Features for a Parquet schema (only `columns` of it, in that order, when given):
    its Hugging Face features where they map (`beam_shards.hf`), Arrow types elsewhere.
    Hugging Face metadata that is malformed, nested too deep or has no equal here is left
    out with a warning naming the file `where` and what was wrong.

    Raises:
      FeatureError: a column of a type no feature holds.
    """
    try:
        hf = hf_features_of(schema.metadata, where)
    except FeatureError as error:
        warnings.warn(f"{error}; its columns follow their Arrow types", stacklevel=2)
        hf = {}
    features = {}
    for field in (schema.field(name) for name in columns) if columns else schema:
        features[field.name] = (_from_hf(field.name, hf, where)
                                or feature_from_arrow(field.name, field.type, field.nullable))
    return Features(features)


def _from_hf(name: str, hf: Mapping[str, Any], where: str) -> Feature | None:
    """Our equal of the Hugging Face feature of column `name`, or None (no such feature, or none
    that maps: a warning says why)."""
    if name not in hf:
        return None
    try:
        return from_hf_dict({name: hf[name]})[name]
    except FeatureError as error:
        warnings.warn(f"{where}: {error}; the column follows its Arrow type", stacklevel=3)
        return None


def read_schema(path: str) -> pa.Schema:
    with fs.open_read(path) as handle:
        return pq.read_schema(handle)


def _row_groups(path: str) -> Iterator[tuple[str, int, int]]:
    """`(path, row group, index of its first row)` for each row group of a Parquet file."""
    with fs.open_read(path) as handle:
        metadata = pq.ParquetFile(handle).metadata
    first = 0
    for group in range(metadata.num_row_groups):
        yield path, group, first
        first += metadata.row_group(group).num_rows


def batch_rows(row_group: pq.RowGroupMetaData, columns: Sequence[str], batch_size: int,
               batch_bytes: int = DEFAULT_BATCH_BYTES) -> int:
    """Rows per record batch when reading `columns` of a row group: at most `batch_size`,
    and few enough that a batch holds about `batch_bytes` (uncompressed) or less."""
    wanted = set(columns)
    size = sum(row_group.column(i).total_uncompressed_size for i in range(row_group.num_columns)
               if row_group.column(i).path_in_schema.split(".", 1)[0] in wanted)
    per_row = size / max(row_group.num_rows, 1)
    return max(1, min(batch_size, int(batch_bytes // per_row) if per_row else batch_size))


def as_feature_columns(batch: pa.RecordBatch, features: Features) -> pa.RecordBatch:
    """`batch` with columns in the form `Features.encode_batch` takes, where that is only a
    change of form: Hugging Face image structs become their bytes (when every image has
    its bytes; one stored by path must be read, row by row) and dictionaries are decoded."""
    columns = []
    for name, feature in features.items():
        column = batch.column(name)
        if isinstance(feature, (Image, Video)) and is_image_struct(column.type):
            data = pc.struct_field(column, "bytes")
            if not pc.any(pc.and_(column.is_valid(), data.is_null())).as_py():
                column = data
        elif pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=list(features))


def _examples(batch: pa.RecordBatch, path: str, first: int, features: Features) -> Iterator[tuple[Where, Any]]:
    """The rows of `batch` as `(where, example)` pairs, image paths resolved against the file."""
    base = tabular.parent(path)
    for offset, row in enumerate(batch.to_pylist()):
        yield (Where.at(path, first + offset, "row"),
               {name: tabular.resolve_paths(value, features[name], base) for name, value in row.items()})


class _ReadArrowStreamFn(beam.DoFn):
    """Reads one Arrow stream file of a saved Hugging Face dataset in batches of at most `batch_size` rows."""

    def __init__(self, features: Features, batch_size: int):
        self._features = features
        self._batch_size = batch_size

    def process(self, path: str) -> Iterator[tuple[Where, Any]]:
        first = 0
        with fs.open_read(path) as handle:
            for whole in pa.ipc.open_stream(handle):
                table = pa.Table.from_batches([whole]).cast(hf_storage_schema(whole.schema)).select(list(self._features))
                for start in range(0, table.num_rows, self._batch_size):
                    batch = table.slice(start, self._batch_size).combine_chunks().to_batches()[0]
                    where = Where(path, first, f"{path}, rows {first} to {first + batch.num_rows - 1}")
                    yield where, common.Rows(as_feature_columns(batch, self._features),
                                             functools.partial(_examples, batch, path, first, self._features))
                    first += batch.num_rows


class _ReadRowGroupFn(beam.DoFn):
    """Reads one row group in record batches of bounded size, each as a `common.Rows`."""

    def __init__(self, features: Features, batch_size: int):
        self._features = features
        self._batch_size = batch_size

    def process(self, element: tuple[str, int, int]) -> Iterator[tuple[Where, Any]]:
        path, group, first = element
        columns = list(self._features)
        with fs.open_read(path) as handle:
            parquet = pq.ParquetFile(handle, buffer_size=_READ_BUFFER_BYTES, pre_buffer=False)
            names = parquet.schema_arrow.names
            present = set(names)
            missing = [name for name in columns if name not in present]
            if missing:
                yield (Where(path, first, f"{path}, row group {group}"),
                       common.Malformed(f"has no column {few(missing)} (its columns: {few(names)})"))
                return
            rows = batch_rows(parquet.metadata.row_group(group), columns, self._batch_size)
            for batch in parquet.iter_batches(batch_size=rows, row_groups=[group], columns=columns):
                where = Where(path, first, f"{path}, rows {first} to {first + batch.num_rows - 1}")
                yield where, common.Rows(as_feature_columns(batch, self._features),
                                         functools.partial(_examples, batch, path, first, self._features))
                first += batch.num_rows


def build_parser() -> argparse.ArgumentParser:
    parser = common.make_parser(
        "parquet", "Re-shard Parquet files (e.g. a Hugging Face hub export) into a cache.")
    parser.add_argument("--input", required=True, metavar="PATTERN",
                        help="a Parquet file or a glob pattern of several (local, gs://...), like data/train-*.parquet, "
                             "or a folder Hugging Face's Dataset.save_to_disk wrote")
    parser.add_argument("--features", metavar="FILE",
                        help="a JSON file of the features (as Features.to_dict() gives); by default they come "
                             "from the first file's Hugging Face metadata and Arrow schema")
    parser.add_argument("--columns", metavar="NAME", nargs="+",
                        help="only these columns (default: all); leaves out a column of a type no feature holds")
    parser.add_argument("--label_column", metavar="NAME",
                        help="a column of class names or ids, stored as a ClassLabel with the classes of all rows "
                             "(or those --classes or --classes_from pin)")
    return parser


def _column_values(files: list[str], name: str, saved: Any) -> list[Any]:
    """Every value of column `name` in `files` (Parquet, or the Arrow streams of a saved dataset)."""
    values: list[Any] = []
    for path in files:
        with fs.open_read(path) as handle:
            if saved:
                values += [v for batch in pa.ipc.open_stream(handle) for v in batch.column(name).to_pylist()]
            else:
                values += pq.read_table(handle, columns=[name]).column(name).to_pylist()
    return values


def _check_columns(parser: argparse.ArgumentParser, columns: Sequence[str] | None, available: Sequence[str]) -> None:
    unknown = [name for name in columns or () if name not in available]
    if unknown:
        parser.error(f"--columns: no column {', '.join(map(repr, unknown))} (there are: {', '.join(available)})")


def run(argv: Sequence[str] | None = None) -> Manifest:
    """Runs the pipeline with command-line flags `argv`; returns the published manifest."""
    return common.run_conversion(plan(argv))


def plan(argv: Sequence[str] | None = None) -> common.Conversion:
    """The conversion the command-line flags `argv` ask for, ready to run."""
    parser = build_parser()
    args, options = common.parse_args(parser, argv)
    try:
        saved = saved_dataset(common.input_uri(args.input))
    except (FeatureError, OSError, ValueError) as error:
        parser.error(f"--input {args.input}: {error}")
    files = saved[0] if saved else common.input_files(parser, args.input)
    features = common.given_features(parser, args)
    if features is not None:
        _check_columns(parser, args.columns, list(features))
        if args.columns:
            features = Features({name: features[name] for name in args.columns})
    elif saved:
        _check_columns(parser, args.columns, list(saved[1]))
        try:
            features = from_hf_dict({name: saved[1][name] for name in args.columns or saved[1]})
        except FeatureError as error:
            parser.error(f"cannot map the features of {args.input}: {error}")
    else:
        try:
            schema = read_schema(files[0])
        except (OSError, pa.ArrowInvalid) as error:
            parser.error(f"cannot read the Parquet schema of {files[0]}: {error}")
        _check_columns(parser, args.columns, schema.names)
        with common.inferring(parser, files):
            features = infer_features(schema, args.columns, files[0])
    if args.label_column:
        if args.label_column not in features:
            parser.error(f"--label_column: no column {args.label_column!r} (there are: {', '.join(features)})")
        pinned = classes.pinned_classes(args, args.label_column)
        named = features[args.label_column]
        if pinned is not None and isinstance(named, ClassLabel) and named.names and \
                named.names != pinned[:len(named.names)]:  # its ids would name other classes
            parser.error(f"{classes.pinned_by(args)}: column {args.label_column!r} holds the ids of a ClassLabel of "
                         f"{few(named.names)} (the file's metadata), which are not the first of the classes given "
                         f"({few(pinned)}); renumber them upstream, or convert without pinning the classes")
        # Pinned classes need the values only to refuse one outside them before the run.
        values = () if pinned is not None and args.skip_bad else _column_values(files, args.label_column, saved)
        try:
            label = common.class_label_of_values(args.label_column, values, features[args.label_column].nullable,
                                                 pinned, skip_bad=args.skip_bad)
        except FeatureError as error:
            parser.error(f"{classes.pinned_by(args)}: {error}" if pinned is not None else str(error))
        features = Features({**features, args.label_column: label})

    def read(pipeline: beam.Pipeline) -> beam.PCollection:
        if saved:
            return (pipeline
                    | "Files" >> beam.Create(files)
                    | "ReadArrowFiles" >> beam.ParDo(_ReadArrowStreamFn(features, args.batch_size)))
        return (pipeline
                | "Files" >> beam.Create(files)
                | "RowGroups" >> beam.FlatMap(_row_groups)
                | "Spread" >> beam.Reshuffle()
                | "ReadRowGroups" >> beam.ParDo(_ReadRowGroupFn(features, args.batch_size)))

    return common.Conversion(options, args, read, features, {"pipeline": "parquet", "input": args.input})


if __name__ == "__main__":
    common.run_script(__spec__.name)
