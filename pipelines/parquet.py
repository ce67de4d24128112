"""Parquet files into a cache, such as a dataset exported from the Hugging Face hub.

Images stored as a struct of `bytes` and `path` (the Hugging Face layout) become Image
columns; the Hugging Face features in the file's metadata (class names included) are
used when present, and otherwise features follow the Arrow types. Files are split by
row group, so many workers share one large file, and a row group is read in record
batches of bounded size. A batch whose columns already fit the features goes to the
sink whole; any other is read row by row. Errors name the file and the row.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from beam_shards.errors import FeatureError
from beam_shards.features import (VALUE_DTYPES, Array, ClassLabel, Feature, Features, Image,
                                  Sequence as SequenceFeature, Value, Video)
from beam_shards.format.manifest import Manifest
from beam_shards.shards.writer import DEFAULT_BATCH_BYTES
from beam_shards.storage import fs
from pipelines import common, tabular
from pipelines.where import Where

_HF_METADATA_KEY = b"huggingface"
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
      FeatureError: no feature holds values of this type (a timestamp, a map...); names
        the column and its type, and says what works instead.
    """
    feature = _feature_of_type(arrow_type, nullable)
    if feature is None:
        raise FeatureError(
            f"column {name!r} has Arrow type {arrow_type}, which no feature can hold: leave the column out "
            "with --columns (listing the columns to keep), or cast it upstream to a type that maps "
            "(string, integer, floating point, bool, binary, or lists of them)")
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
    if pa.types.is_fixed_size_list(arrow_type):
        item = _feature_of_type(arrow_type.value_type, False)
        if isinstance(item, Value) and item.dtype not in ("string", "binary"):
            return Array((arrow_type.list_size,), item.dtype, nullable=nullable)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        item = _feature_of_type(arrow_type.value_type, arrow_type.value_field.nullable)
        return None if item is None else SequenceFeature(item, nullable=nullable)
    return None


def feature_from_hf(spec: Any, nullable: bool = False) -> Feature | None:
    """Our feature for a Hugging Face feature spec, or None when there is no direct match."""
    if isinstance(spec, list) and len(spec) == 1:
        spec = {"_type": "Sequence", "feature": spec[0]}
    if not isinstance(spec, Mapping):
        return None
    kind = spec.get("_type")
    if kind == "Image":
        return Image()
    if kind == "ClassLabel" and spec.get("names"):
        return ClassLabel(names=list(spec["names"]), nullable=nullable)
    if kind == "Value":
        dtype = {"large_string": "string", "large_binary": "binary"}.get(spec.get("dtype"), spec.get("dtype"))
        return Value(dtype, nullable=nullable) if dtype in VALUE_DTYPES else None
    if kind in ("Sequence", "List") and spec.get("length", -1) == -1:
        item = feature_from_hf(spec.get("feature"), nullable=True)
        return SequenceFeature(item, nullable=nullable) if item is not None else None
    return None


def infer_features(schema: pa.Schema, columns: Sequence[str] | None = None) -> Features:
    """Features for a Parquet schema (only `columns` of it, in that order, when given):
    its Hugging Face features where they map, Arrow types elsewhere.

    Raises:
      FeatureError: a column of a type no feature holds.
    """
    hf: Mapping[str, Any] = {}
    if schema.metadata and _HF_METADATA_KEY in schema.metadata:
        try:
            hf = json.loads(schema.metadata[_HF_METADATA_KEY]).get("info", {}).get("features", {}) or {}
        except (ValueError, AttributeError):
            hf = {}
    features = {}
    for field in (schema.field(name) for name in columns) if columns else schema:
        mapped = feature_from_hf(hf.get(field.name), field.nullable)
        features[field.name] = mapped if mapped is not None else feature_from_arrow(field.name, field.type,
                                                                                     field.nullable)
    return Features(features)


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
            missing = [name for name in columns if name not in parquet.schema_arrow.names]
            if missing:
                yield (Where(path, first, f"{path}, row group {group}"),
                       common.Malformed(f"has no column {', '.join(map(repr, missing))} "
                                        f"(its columns: {', '.join(parquet.schema_arrow.names)})"))
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
                        help="a Parquet file or a glob pattern of several (local, gs://...), like data/train-*.parquet")
    parser.add_argument("--features", metavar="FILE",
                        help="a JSON file of the features (as Features.to_dict() gives); by default they come "
                             "from the first file's Hugging Face metadata and Arrow schema")
    parser.add_argument("--columns", metavar="NAME", nargs="+",
                        help="only these columns (default: all); leaves out a column of a type no feature holds")
    return parser


def _check_columns(parser: argparse.ArgumentParser, columns: Sequence[str] | None, available: Sequence[str]) -> None:
    unknown = [name for name in columns or () if name not in available]
    if unknown:
        parser.error(f"--columns: no column {', '.join(map(repr, unknown))} (there are: {', '.join(available)})")


def run(argv: Sequence[str] | None = None) -> Manifest:
    """Runs the pipeline with command-line flags `argv`; returns the published manifest."""
    parser = build_parser()
    args, options = common.parse_args(parser, argv)
    files = common.input_files(parser, args.input)
    if args.features:
        features = common.load_features(parser, args.features)
        _check_columns(parser, args.columns, list(features))
        if args.columns:
            features = Features({name: features[name] for name in args.columns})
    else:
        try:
            schema = read_schema(files[0])
        except (OSError, pa.ArrowInvalid) as error:
            parser.error(f"cannot read the Parquet schema of {files[0]}: {error}")
        _check_columns(parser, args.columns, schema.names)
        try:
            features = infer_features(schema, args.columns)
        except FeatureError as error:
            parser.error(f"cannot infer the features of {files[0]}: {error}")

    def read(pipeline: beam.Pipeline) -> beam.PCollection:
        return (pipeline
                | "Files" >> beam.Create(files)
                | "RowGroups" >> beam.FlatMap(_row_groups)
                | "Spread" >> beam.Reshuffle()
                | "ReadRowGroups" >> beam.ParDo(_ReadRowGroupFn(features, args.batch_size)))

    return common.run_pipeline(options, args, read, features, {"pipeline": "parquet", "input": args.input})


if __name__ == "__main__":
    common.run_script(__spec__.name)
