"""Parquet files into a cache, such as a dataset exported from the Hugging Face hub.

Images stored as a struct of `bytes` and `path` (the Hugging Face layout) become Image
columns; the Hugging Face features in the file's metadata (class names included) are
used when present, and otherwise features follow the Arrow types. Files are split by
row group, so many workers share one large file; errors name the file and the row.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq

from beam_shards import fs
from beam_shards.errors import FeatureError
from beam_shards.features import (VALUE_DTYPES, Array, ClassLabel, Feature, Features, Image,
                                  Sequence as SequenceFeature, Value)
from beam_shards.manifest import Manifest
from pipelines import common, tabular

_HF_METADATA_KEY = b"huggingface"


def is_image_struct(arrow_type: pa.DataType) -> bool:
    """Whether a column type is an image as Hugging Face stores it: struct<bytes: binary, path: string>."""
    if not pa.types.is_struct(arrow_type):
        return False
    names = {arrow_type.field(i).name for i in range(arrow_type.num_fields)}
    return "bytes" in names and names <= {"bytes", "path"}


def feature_from_arrow(name: str, arrow_type: pa.DataType, nullable: bool = False) -> Feature:
    """The feature of a Parquet column from its Arrow type. Raises FeatureError for a type it cannot map."""
    if is_image_struct(arrow_type):
        return Image()
    if pa.types.is_dictionary(arrow_type):
        return feature_from_arrow(name, arrow_type.value_type, nullable)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return Value("string", nullable=nullable)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return Value("binary", nullable=nullable)
    if pa.types.is_boolean(arrow_type) or pa.types.is_integer(arrow_type):
        return Value(str(arrow_type), nullable=nullable)
    if pa.types.is_floating(arrow_type):
        return Value(f"float{arrow_type.bit_width}", nullable=nullable)
    if pa.types.is_fixed_size_list(arrow_type):
        item = feature_from_arrow(name, arrow_type.value_type)
        if isinstance(item, Value) and item.dtype not in ("string", "binary"):
            return Array((arrow_type.list_size,), item.dtype, nullable=nullable)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return SequenceFeature(feature_from_arrow(name, arrow_type.value_type, arrow_type.value_field.nullable),
                               nullable=nullable)
    raise FeatureError(f"column {name!r} has Arrow type {arrow_type}, which has no feature here; "
                       "declare its feature in a --features file")


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


def infer_features(schema: pa.Schema) -> Features:
    """Features for a Parquet schema: its Hugging Face features where they map, Arrow types elsewhere."""
    hf: Mapping[str, Any] = {}
    if schema.metadata and _HF_METADATA_KEY in schema.metadata:
        try:
            hf = json.loads(schema.metadata[_HF_METADATA_KEY]).get("info", {}).get("features", {}) or {}
        except (ValueError, AttributeError):
            hf = {}
    features = {}
    for field in schema:
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


class _ReadRowGroupFn(beam.DoFn):
    """Reads one row group into `(where, example)` pairs, image paths resolved against the file."""

    def __init__(self, features: Features):
        self._features = features

    def process(self, element: tuple[str, int, int]) -> Iterator[tuple[str, Any]]:
        path, group, first = element
        columns = list(self._features)
        with fs.open_read(path) as handle:
            parquet = pq.ParquetFile(handle)
            missing = [name for name in columns if name not in parquet.schema_arrow.names]
            if missing:
                yield (f"{path}, row group {group}",
                       common.Malformed(f"has no column {', '.join(map(repr, missing))} "
                                        f"(its columns: {', '.join(parquet.schema_arrow.names)})"))
                return
            rows = parquet.read_row_group(group, columns=columns).to_pylist()
        base = tabular.parent(path)
        for offset, row in enumerate(rows):
            yield (f"{path}, row {first + offset}",
                   {name: tabular.resolve_paths(value, self._features[name], base) for name, value in row.items()})


def build_parser() -> argparse.ArgumentParser:
    parser = common.make_parser(
        "parquet", "Re-shard Parquet files (e.g. a Hugging Face hub export) into a cache.")
    parser.add_argument("--input", required=True, metavar="PATTERN",
                        help="a Parquet file or a glob pattern of several (local, gs://...), like data/train-*.parquet")
    parser.add_argument("--features", metavar="FILE",
                        help="a JSON file of the features (as Features.to_dict() gives); by default they come "
                             "from the first file's Hugging Face metadata and Arrow schema")
    parser.add_argument("--columns", metavar="NAME", nargs="+",
                        help="only these columns (default: all)")
    return parser


def run(argv: Sequence[str] | None = None) -> Manifest:
    """Runs the pipeline with command-line flags `argv`; returns the published manifest."""
    parser = build_parser()
    args, options = common.parse_args(parser, argv)
    files = sorted(fs.list_files([common.input_uri(args.input)]))
    if not files:
        parser.error(f"--input: no file matches {args.input}")
    if args.features:
        features = common.load_features(parser, args.features)
    else:
        try:
            features = infer_features(read_schema(files[0]))
        except (OSError, pa.ArrowInvalid) as error:
            parser.error(f"cannot read the Parquet schema of {files[0]}: {error}")
        except FeatureError as error:
            parser.error(f"cannot infer the features of {files[0]}: {error}")
    if args.columns:
        unknown = [name for name in args.columns if name not in features]
        if unknown:
            parser.error(f"--columns: no column {', '.join(map(repr, unknown))} (there are: {', '.join(features)})")
        features = Features({name: features[name] for name in args.columns})

    def build(pipeline: beam.Pipeline) -> None:
        examples = (pipeline
                    | "Files" >> beam.Create(files)
                    | "RowGroups" >> beam.FlatMap(_row_groups)
                    | "Spread" >> beam.Reshuffle()
                    | "ReadRowGroups" >> beam.ParDo(_ReadRowGroupFn(features)))
        common.write_cache(examples, args, features, {"pipeline": "parquet", "input": args.input})

    return common.run_pipeline(options, build, args.output)


if __name__ == "__main__":
    common.run_script(__spec__.name)
