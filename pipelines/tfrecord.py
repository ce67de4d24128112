"""TFRecord files of `tf.train.Example`, or a prepared TensorFlow Datasets folder, into a cache.

    python -m pipelines.tfrecord --input 'data/train-*.tfrecord' --output cache/train
    python -m pipelines.tfrecord --input ~/tensorflow_datasets/mnist/3.0.1 --split train --output cache/mnist

Records are read with Beam's FileBasedSource machinery (a file per worker at a time)
and parsed without TensorFlow (see `pipelines.tf_example`). Features are inferred from
the first records, given with `--features features.json`, or, for a TFDS folder (one
with `dataset_info.json` and `features.json`), taken from TFDS's own metadata: class
names, image shapes and tensor shapes and dtypes. Errors name the file, the record
number (from 0) and its byte offset.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa

from beam_shards import fs, images
from beam_shards.errors import FeatureError
from beam_shards.features import (VALUE_DTYPES, Array, ClassLabel, Feature, Features, Image,
                                  Sequence as SequenceFeature, Value)
from beam_shards.manifest import Manifest
from beam_shards.writer import DEFAULT_BATCH_BYTES
from pipelines import common, tabular, tf_example

TFDS_INFO = "dataset_info.json"
TFDS_FEATURES = "features.json"
TFDS_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
# The content fields of TFDS's Feature proto (tensorflow_datasets/core/proto/feature.proto), as proto JSON names them.
_TFDS_KINDS = ("featuresDict", "tensor", "classLabel", "image", "video", "audio", "boundingBox", "text",
               "translation", "sequence", "jsonFeature")


# --- inference from the first records ------------------------------------------------

def _is_image(value: bytes) -> bool:
    try:
        images.sniff_format(value)
    except ValueError:
        return False
    return True


def _is_text(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _bytes_feature(values: list[bytes]) -> Feature:
    if values and all(_is_image(value) for value in values):
        return Image()
    return Value("string" if all(_is_text(value) for value in values) else "binary")


def _infer_feature(name: str, present: list[tuple[str | None, list[Any]]], nullable: bool) -> Feature:
    kinds = {kind for kind, _ in present if kind is not None}
    if len(kinds) > 1:
        raise FeatureError(f"feature {name!r} is a {' in some records, a '.join(sorted(kinds))} in others; "
                           "declare it in a --features file")
    if not kinds:
        raise FeatureError(f"feature {name!r} holds no list in the records looked at: cannot infer its type; "
                           "declare it in a --features file")
    (kind,) = kinds
    lengths = {len(values) for _, values in present}
    items = [item for _, values in present for item in values]
    if lengths <= {0, 1}:
        nullable = nullable or 0 in lengths
        if kind == "bytes_list":
            feature = _bytes_feature(items)
            return Image(nullable=nullable) if isinstance(feature, Image) else Value(feature.dtype, nullable=nullable)
        return Value(tf_example.KIND_DTYPES[kind], nullable=nullable)
    if kind == "bytes_list":
        return SequenceFeature(_bytes_feature(items), nullable=nullable)
    if len(lengths) == 1:
        return Array((lengths.pop(),), tf_example.KIND_DTYPES[kind], nullable=nullable)
    return SequenceFeature(Value(tf_example.KIND_DTYPES[kind]), nullable=nullable)


def infer_features(records: Sequence[Mapping[str, tuple[str | None, list[Any]]]], *,
                   label_column: str | None = None, label_values: Iterable[Any] = ()) -> Features:
    """Features for Examples given as `tf_example.inspect` gives them (names sorted).

    A one-value bytes_list is an Image when every value looked at is a complete image,
    else a string (UTF-8) or binary Value; a one-value int64_list or float_list is a
    Value (int64, float32), or with `label_column` a ClassLabel with the classes of
    `label_values`; lists of one length in every record are Arrays, others Sequences.
    A feature missing from some records is nullable.

    Raises:
      FeatureError: no records, a feature of mixed kinds or never holding a list, or a
        label column that is missing or not one int or string per record.
    """
    if not records:
        raise FeatureError("there are no records to infer features from; give --features")
    names = sorted({name for record in records for name in record})
    if label_column and label_column not in names:
        raise FeatureError(f"feature {label_column!r} is not in the records (their features: {', '.join(names)})")
    features: dict[str, Feature] = {}
    for name in names:
        present = [record[name] for record in records if name in record]
        nullable = len(present) < len(records)
        if name == label_column:
            lengths = {len(values) for _, values in present}
            if not lengths <= {0, 1}:
                raise FeatureError(f"label feature {name!r} holds more than one value in a record")
            features[name] = tabular._class_label(name, label_values, nullable or 0 in lengths)
        else:
            features[name] = _infer_feature(name, present, nullable)
    return Features(features)


def _records(files: Sequence[str], compression: str) -> Iterator[dict[str, tuple[str | None, list[Any]]]]:
    """The Examples of `files` that parse, as `tf_example.inspect` gives them."""
    for path in files:
        for _, data in tf_example.open_records(path, compression):
            if isinstance(data, common.Malformed):
                continue
            try:
                yield tf_example.inspect(data)
            except ValueError:
                continue


def _label_value(kind: str | None, values: list[Any]) -> Any:
    if not values:
        return None
    value = values[0]
    return value.decode("utf-8", "replace") if kind == "bytes_list" else value


# --- TensorFlow Datasets folders -----------------------------------------------------

def find_tfds_folder(path: str) -> str | None:
    """The TFDS dataset folder (`<name>/<version>/`) that `path` names, or None.

    `path` may be the version folder itself, or the dataset folder above it, where
    its latest version is taken.
    """
    if fs.exists(fs.join(path, TFDS_INFO)):
        return path
    versions = []
    for found in fs.list_files([fs.join(path, "*", TFDS_INFO)]):
        version = found.replace("\\", "/").rsplit("/", 2)[-2]
        if _VERSION.match(version):
            versions.append((tuple(int(part) for part in version.split(".")), version))
    return fs.join(path, max(versions)[1]) if versions else None


def _read_json(path: str) -> Any:
    try:
        return json.loads(fs.read_bytes(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise FeatureError(f"cannot read {path}: {error}") from None


def split_files(folder: str, info: Mapping[str, Any], split: str | None) -> tuple[str, list[str], int]:
    """`(split name, shard paths, number of examples)` of a split of a TFDS folder.

    Raises:
      FeatureError: no such split, shards that are not TFRecords, or a shard missing.
    """
    splits = {entry.get("name"): entry for entry in info.get("splits", [])}
    if split is None and len(splits) == 1:
        split = next(iter(splits))
    if split not in splits:
        available = ", ".join(sorted(map(str, splits))) or "none"
        raise FeatureError(f"give --split: one of {available}" if split is None
                           else f"the dataset has no split {split!r} (its splits: {available})")
    entry = splits[split]
    file_format = info.get("fileFormat") or "tfrecord"
    if file_format != "tfrecord":
        raise FeatureError(f"the dataset's shards are {file_format} files; only TFRecord shards are read")
    lengths = [int(length) for length in entry.get("shardLengths", [])]
    count = len(lengths) or int(entry.get("numShards", 0))
    digits = max(len(str(count)), 5)
    names = []
    for index in range(count):
        name = entry.get("filepathTemplate") or TFDS_TEMPLATE
        for variable, value in (("DATASET", info.get("name", "")), ("SPLIT", split), ("FILEFORMAT", file_format),
                                ("SHARD_X_OF_Y", f"{index:0{digits}d}-of-{count:0{digits}d}"),
                                ("SHARD_INDEX", f"{index:0{digits}d}"), ("NUM_SHARDS", f"{count:0{digits}d}")):
            name = name.replace("{" + variable + "}", value)
        names.append(fs.join(folder, name))
    missing = [path for path, size in fs.sizes(names).items() if size is None]
    if missing:
        raise FeatureError(f"{len(missing)} shard(s) of split {split!r} are missing, such as {missing[0]}")
    return split, names, sum(lengths)


def _shape(spec: Mapping[str, Any]) -> tuple[int | None, ...]:
    return tuple(None if int(d) < 0 else int(d) for d in (spec.get("shape") or {}).get("dimensions", []))


def _tensor_feature(name: str, spec: Mapping[str, Any]) -> tuple[Feature, str | None]:
    """Our feature (and decoder) for a TFDS Tensor or Scalar."""
    dtype, shape = spec.get("dtype", ""), _shape(spec)
    encoding = spec.get("encoding") or "none"
    decoder = None if encoding == "none" else encoding
    if decoder is not None and decoder not in tf_example.DECODERS:
        raise FeatureError(f"feature {name!r}: tensor encoding {encoding!r} is not supported")
    if dtype == "string":
        if decoder is None and len(shape) <= 1:
            return (Value("binary") if not shape else SequenceFeature(Value("binary"))), None
        raise FeatureError(f"feature {name!r}: string tensors of shape {shape} are not supported")
    if dtype not in VALUE_DTYPES:
        raise FeatureError(f"feature {name!r}: dtype {dtype!r} has no matching feature")
    if not shape and decoder is None:
        return Value(dtype), None
    if any(d is None for d in shape[1:]) or (decoder is not None and None in shape):
        raise FeatureError(f"feature {name!r}: tensors of shape {shape} (unknown inner dimensions) are not "
                           "supported; leave the feature out with a --features file")
    return Array(shape or (1,), dtype), decoder


def _labels_file(folder: str, name: str) -> list[str] | None:
    path = fs.join(folder, name.replace("/", "-") + ".labels.txt")
    if not fs.exists(path):
        return None
    return [line.strip() for line in fs.read_bytes(path).decode("utf-8").split("\n") if line.strip()]


def _class_label(name: str, spec: Mapping[str, Any], folder: str) -> ClassLabel:
    names = spec.get("names") or _labels_file(folder, name)
    count = int(spec.get("numClasses", 0) or 0)
    if names and count and len(names) != count:
        raise FeatureError(f"feature {name!r}: {len(names)} class names for {count} classes")
    if not names and not count:
        raise FeatureError(f"feature {name!r}: a ClassLabel with neither class names nor a number of classes")
    # TFDS writes -1 for an example without a label: stored as null.
    return ClassLabel(names=list(names), nullable=True) if names else ClassLabel(num_classes=count, nullable=True)


_Column = tuple[str, Feature, "str | None", dict[str, Any]]


def _tfds_columns(name: str, spec: Mapping[str, Any], folder: str) -> Iterator[_Column]:
    """The columns (Example keys) of one TFDS feature: `(name, feature, decoder, what TFDS says)`."""
    kind = next((key for key in _TFDS_KINDS if key in spec), None)
    tfds_class = str(spec.get("pythonClassName", kind)).rsplit(".", 1)[-1]
    content = spec.get(kind) or {}
    described: dict[str, Any] = {"tfds": tfds_class}
    if kind == "featuresDict":
        for child, child_spec in sorted(content.get("features", {}).items()):
            yield from _tfds_columns(f"{name}/{child}" if name else child, child_spec, folder)
        return
    if kind == "sequence" and tfds_class != "Dataset":
        length = int(content.get("length", -1))
        for column, feature, decoder, inner in _tfds_columns(name, content.get("feature", {}), folder):
            yield column, _sequence_of(column, feature, decoder, length), None, {
                "tfds": "Sequence", "length": None if length < 0 else length, "feature": inner}
        return
    if kind == "translation":
        if content.get("variableLanguagesPerExample"):
            raise FeatureError(f"feature {name!r}: a TranslationVariableLanguages feature is not supported")
        for language in content.get("languages", []):
            yield f"{name}/{language}", Value("string"), None, {"tfds": "Text"}
        return
    decoder = None
    if kind == "classLabel":
        feature = _class_label(name, content, folder)
    elif kind == "text":
        feature = Value("string")
    elif kind in ("image", "video"):
        feature = Image(nullable=False) if kind == "image" else SequenceFeature(Image(nullable=False))
        described.update(shape=list(_shape(content)), dtype=content.get("dtype"),
                         encoding_format=content.get("encodingFormat") or None)
    elif kind in ("tensor", "audio", "boundingBox"):
        feature, decoder = _tensor_feature(name, {"dtype": "float32", "shape": {"dimensions": ["4"]}}
                                           if kind == "boundingBox" and not content else content)
        described.update(shape=list(_shape(content)), dtype=content.get("dtype"))
        if content.get("encoding") not in (None, "", "none"):
            described["encoding"] = content["encoding"]
    else:
        raise FeatureError(f"feature {name!r} is a TFDS {tfds_class}, which is not supported; "
                           "give a --features file without it")
    yield name, feature, decoder, described


def _sequence_of(name: str, feature: Feature, decoder: str | None, length: int) -> Feature:
    size = None if length < 0 else length
    if decoder is None and isinstance(feature, Value) and feature.dtype not in ("string", "binary"):
        return Array((size,), feature.dtype)
    if decoder is None and isinstance(feature, Array) and not feature.variable:
        return Array((size, *feature.shape), feature.dtype)
    if decoder is None and isinstance(feature, (Value, ClassLabel, Image)):
        return SequenceFeature(feature)
    raise FeatureError(f"feature {name!r}: a Sequence of {feature!r} is not supported")


def tfds_features(folder: str, spec: Mapping[str, Any]) -> tuple[Features, dict[str, str], dict[str, Any]]:
    """Our features for a TFDS `features.json`: `(features, decoders, what TFDS says of each)`.

    Nested FeaturesDicts become columns named `parent/child`, as the Examples store them.

    Raises:
      FeatureError: a feature with no equivalent here (RLDS datasets, ragged tensors...).
    """
    features, decoders, described = {}, {}, {}
    for name, feature, decoder, info in _tfds_columns("", spec, folder):
        features[name] = feature
        described[name] = info
        if decoder:
            decoders[name] = decoder
    if not features:
        raise FeatureError(f"{fs.join(folder, TFDS_FEATURES)} declares no features")
    return Features(features), decoders, described


def _tfds_metadata(info: Mapping[str, Any], split: str, files: list[str], count: int,
                   described: Mapping[str, Any]) -> dict[str, Any]:
    metadata = {"name": info.get("name"), "config": info.get("configName") or None,
                "version": info.get("version"), "split": split, "num_examples": count, "num_shards": len(files),
                "description": info.get("description"), "citation": info.get("citation"),
                "homepage": (info.get("location") or {}).get("urls", [None])[0],
                "supervised_keys": info.get("supervisedKeys"), "features": dict(described)}
    return {key: value for key, value in metadata.items() if value not in (None, "", [], {})}


# --- the pipeline --------------------------------------------------------------------

class _ToExamplesFn(beam.DoFn):
    """Parses a batch of `(where, record bytes)` into one `common.Rows` that the encode step
    checks whole; a record that is Malformed or does not fit goes on alone, named."""

    def __init__(self, features: Features, decoders: Mapping[str, str]):
        self._features = features
        self._decoders = dict(decoders)
        self._reader: tf_example.ExampleReader | None = None

    def setup(self):
        self._reader = tf_example.ExampleReader(self._features, self._decoders)

    def process(self, records: list[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        good = []
        for where, data in records:
            if isinstance(data, common.Malformed):
                yield where, data
                continue
            try:
                good.append((where, self._reader(data)))
            except ValueError as error:
                yield where, common.Malformed(str(error))
        if not good:
            return
        try:
            table = self._reader.table([example for _, example in good])
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            yield from good  # no common Arrow form: the encode step checks them one by one
            return
        where = good[0][0] if len(good) == 1 else f"{good[0][0]} and {len(good) - 1} more record(s)"
        yield where, common.Rows(table, functools.partial(iter, good))


def build_parser() -> argparse.ArgumentParser:
    parser = common.make_parser(
        "tfrecord", "Convert TFRecord files of tf.train.Example (or a prepared TensorFlow Datasets folder) "
        "into a cache, without TensorFlow.")
    parser.add_argument("--input", required=True, metavar="PATTERN",
                        help="a TFRecord file or a glob pattern of several (local, gs://, s3://...), like "
                             "data/train-*.tfrecord; or a TFDS folder NAME/VERSION holding dataset_info.json")
    parser.add_argument("--split", metavar="NAME",
                        help="the split of a TFDS folder to convert, like train (needed when it has several)")
    parser.add_argument("--features", metavar="FILE",
                        help="a JSON file of the features (as Features.to_dict() gives); by default TFDS's "
                             "metadata, or inferred from the first records")
    parser.add_argument("--label_column", metavar="NAME",
                        help="an int64 or bytes feature to store as a ClassLabel; its classes are read from "
                             "every record before the pipeline starts")
    parser.add_argument("--infer_rows", type=common.positive_int, default=100, metavar="N",
                        help="how many records type inference looks at (default 100)")
    parser.add_argument("--input_compression", choices=sorted(tf_example.COMPRESSIONS), default="auto",
                        help="compression of the TFRecord files: auto (by extension: .gz, .deflate...) "
                             "or none, gzip, zlib (default auto)")
    return parser


def _plain_input(parser: argparse.ArgumentParser, args: argparse.Namespace,
                 compression: str) -> tuple[list[str], Features | None]:
    """The files of a file or glob `--input`, and the features inferred from them unless given."""
    if args.split:
        parser.error("--split picks the shards of a TFDS folder; --input is not one "
                     f"(no {TFDS_INFO} in it or in a version folder below it)")
    if args.features and args.label_column:
        parser.error("--label_column only guides inference; with --features declare the label as a ClassLabel")
    local = common.input_uri(args.input)
    if fs.is_local(local) and os.path.isdir(fs.local_path(local)):
        parser.error(f"--input {args.input} is a folder without {TFDS_INFO}: give a file or a glob, like "
                     f"{os.path.join(args.input, '*.tfrecord*')}")
    files = common.input_files(parser, args.input)
    if args.features:
        return files, None
    try:
        labels = []
        if args.label_column:
            labels = [_label_value(*record[args.label_column]) for record in _records(files, compression)
                      if args.label_column in record]
        first = list(itertools.islice(_records(files, compression), args.infer_rows))
        return files, infer_features(first, label_column=args.label_column, label_values=labels)
    except OSError as error:
        parser.error(f"cannot read {args.input}: {error}")
    except FeatureError as error:
        parser.error(f"cannot infer the features of {files[0]}: {error}")


def run(argv: Sequence[str] | None = None) -> Manifest:
    """Runs the pipeline with command-line flags `argv`; returns the published manifest."""
    parser = build_parser()
    args, options = common.parse_args(parser, argv)
    compression = tf_example.COMPRESSIONS[args.input_compression]
    try:
        tf_example.check_crc32c()
    except ImportError as error:
        parser.error(str(error))
    folder = find_tfds_folder(common.input_uri(args.input))
    metadata: dict[str, Any] = {"pipeline": "tfrecord", "input": args.input}
    decoders: dict[str, str] = {}
    if folder is None:
        files, features = _plain_input(parser, args, compression)
    else:
        if args.label_column:
            parser.error("--label_column is for plain TFRecords: a TFDS folder's ClassLabels come from its metadata")
        try:
            info = _read_json(fs.join(folder, TFDS_INFO))
            split, files, count = split_files(folder, info, args.split)
        except FeatureError as error:
            parser.error(f"TFDS folder {folder}: {error}")
        try:
            features, decoders, described = tfds_features(folder, _read_json(fs.join(folder, TFDS_FEATURES)))
        except FeatureError as error:
            if not args.features:  # a --features file may leave out what has no equivalent here
                parser.error(f"TFDS folder {folder}: {error}")
            features, decoders, described = None, {}, {}
        metadata["tfds"] = _tfds_metadata(info, split, files, count, described)
    if args.features:
        features = common.load_features(parser, args.features)
        decoders = {name: decoder for name, decoder in decoders.items() if isinstance(features.get(name), Array)}
    try:
        tf_example.ExampleReader(features, decoders)
    except ValueError as error:
        parser.error(f"--features: {error}")

    def read(pipeline: beam.Pipeline) -> beam.PCollection:
        return (pipeline
                | "Files" >> beam.Create(files)
                | "ReadRecords" >> tf_example.ReadTFRecords(compression, batch_size=args.batch_size,
                                                            batch_bytes=DEFAULT_BATCH_BYTES)
                | "ToExamples" >> beam.ParDo(_ToExamplesFn(features, decoders)))

    return common.run_pipeline(options, args, read, features, metadata)


if __name__ == "__main__":
    common.run_script(__spec__.name)
