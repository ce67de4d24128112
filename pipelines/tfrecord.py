"""TFRecord files of `tf.train.Example`, or a prepared TensorFlow Datasets folder, into a cache.

    python -m pipelines.tfrecord --input 'data/train-*.tfrecord' --output cache/train
    python -m pipelines.tfrecord --input ~/tensorflow_datasets/mnist/3.0.1 --split train --output cache/mnist

Records are read with Beam's FileBasedSource machinery (a file per worker at a time)
and parsed without TensorFlow (see `pipelines.tf_example`). Features are inferred from
the first records, given with `--features features.json`, or, for a TFDS folder (one
with `dataset_info.json` and `features.json`), taken from TFDS's own metadata: class
names, image shapes and tensor shapes and dtypes. Errors name the file, the record
number (from 0) and its byte offset. Records of `tf.train.SequenceExample` are refused
by name: converted as Examples, they would lose their feature_lists.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa

from beam_shards import Array, Feature, FeatureError, Features, Image, Manifest, Sequence as SequenceFeature, Value
from beam_shards.features import image_check
from beam_shards.shards import DEFAULT_BATCH_BYTES
from beam_shards.storage import fs
from beam_shards.units import count_flag
from pipelines import classes, common, tf_example, tfds, tfrecord_io
from pipelines.where import Where

# --- inference from the first records ------------------------------------------------

def _is_image(value: bytes) -> bool:
    try:
        image_check.sniff_format(value)
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


def _infer_feature(name: str, present: list[tuple[str | None, list[Any]]], missing: bool) -> Feature:
    """The feature of the values a feature has in the records that hold it (`missing`: some lack it);
    nullable as csv's and jsonl's columns are (see `infer_features`)."""
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
        if kind == "bytes_list":
            feature = _bytes_feature(items)
            if isinstance(feature, Image):
                return Image(nullable=missing or 0 in lengths)
            return Value(feature.dtype, nullable=True)
        return Value(tf_example.KIND_DTYPES[kind], nullable=True)
    if kind == "bytes_list":
        return SequenceFeature(_bytes_feature(items), nullable=True)
    if len(lengths) == 1:
        return Array((lengths.pop(),), tf_example.KIND_DTYPES[kind], nullable=True)
    return SequenceFeature(Value(tf_example.KIND_DTYPES[kind]), nullable=True)


def infer_features(records: Sequence[Mapping[str, tuple[str | None, list[Any]]]], *,
                   label_column: str | None = None, label_values: Iterable[Any] = (),
                   label_classes: Sequence[str] | None = None, skip_bad: bool = False) -> Features:
    """Features for Examples given as `tf_example.inspect` gives them (names sorted).

    A one-value bytes_list is an Image when every value looked at is a complete image,
    else a string (UTF-8) or binary Value; a one-value int64_list or float_list is a
    Value (int64, float32), or with `label_column` a ClassLabel with the classes of
    `label_values` (or `label_classes`, as `common.class_label_of_values` takes them);
    lists of one length in every record are Arrays, others Sequences.
    Every feature is nullable, as csv's and jsonl's columns are: inference sees only the
    first records, and a later record lacking a feature (or holding an empty list for a
    one-value feature) is null rather than a failed conversion. Images and the label are
    nullable only where a record looked at lacks them, as csv's and jsonl's are (a missing
    image is most often a mistake).

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
            features[name] = common.class_label_of_values(name, label_values, nullable or 0 in lengths,
                                                          label_classes, skip_bad=skip_bad)
        else:
            features[name] = _infer_feature(name, present, nullable)
    return Features(features)


def _records(files: Sequence[str], compression: str) -> Iterator[dict[str, tuple[str | None, list[Any]]]]:
    """The Examples of `files` that parse, as `tf_example.inspect` gives them.

    Raises:
      FeatureError: a record is a tf.train.SequenceExample, naming it.
    """
    for path in files:
        for where, data in tfrecord_io.open_records(path, compression):
            if isinstance(data, common.Malformed):
                continue
            try:
                yield tf_example.inspect(data)
            except tf_example.SequenceExampleError as error:
                raise FeatureError(f"{where}: {error}") from None
            except ValueError:
                continue


def _label_value(record: Mapping[str, tuple[str | None, list[Any]]], name: str) -> Any:
    """The value of feature `name` of a record (as `tf_example.inspect` gives it), None where it has none."""
    kind, values = record.get(name, (None, []))
    if not values:
        return None
    value = values[0]
    return value.decode("utf-8", "replace") if kind == "bytes_list" else value


# --- TensorFlow Datasets folders -----------------------------------------------------

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

    def process(self, records: list[tuple[Where, Any]]) -> Iterator[tuple[Where, Any]]:
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
        first = good[0][0]
        where = first if len(good) == 1 else first._replace(name=f"{first} and {len(good) - 1} more record(s)")
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
                             "every record before the pipeline starts (or pinned by --classes or --classes_from)")
    parser.add_argument("--infer_rows", type=count_flag, default=100, metavar="N",
                        help="how many records type inference looks at (default 100)")
    parser.add_argument("--input_compression", choices=sorted(tfrecord_io.COMPRESSIONS), default="auto",
                        help="compression of the TFRecord files: auto (by extension: .gz, .deflate...) "
                             "or none, gzip, zlib (default auto)")
    return parser


def _plain_input(parser: argparse.ArgumentParser, args: argparse.Namespace,
                 compression: str) -> tuple[list[str], Features]:
    """The files of a file or glob `--input`, and the features given or inferred from them."""
    if args.split:
        parser.error("--split picks the shards of a TFDS folder; --input is not one "
                     f"(no {tfds.TFDS_INFO} in it or in a version folder below it)")
    local = common.input_uri(args.input)
    if fs.is_local(local) and os.path.isdir(fs.local_path(local)):
        parser.error(f"--input {args.input} is a folder without {tfds.TFDS_INFO}: give a file or a glob, like "
                     f"{os.path.join(args.input, '*.tfrecord*')}")
    files = common.input_files(parser, args.input)
    pinned = classes.pinned_classes(args, args.label_column) if args.label_column else None
    try:
        return files, common.infer_from_rows(
            parser, args, files, rows=functools.partial(_records, files, compression), label=_label_value,
            infer=lambda first, labels: infer_features(first, label_column=args.label_column, label_values=labels,
                                                       label_classes=pinned, skip_bad=args.skip_bad))
    except OSError as error:
        parser.error(f"cannot read {args.input}: {error}")


def run(argv: Sequence[str] | None = None) -> Manifest:
    """Runs the pipeline with command-line flags `argv`; returns the published manifest."""
    return common.run_conversion(plan(argv))


def plan(argv: Sequence[str] | None = None) -> common.Conversion:
    """The conversion the command-line flags `argv` ask for, ready to run."""
    parser = build_parser()
    args, options = common.parse_args(parser, argv)
    compression = tfrecord_io.COMPRESSIONS[args.input_compression]
    try:
        tfrecord_io.check_crc32c()
    except ImportError as error:
        parser.error(str(error))
    folder = tfds.find_tfds_folder(common.input_uri(args.input))
    metadata: dict[str, Any] = {"pipeline": "tfrecord", "input": args.input}
    decoders: dict[str, str] = {}
    if folder is None:
        files, features = _plain_input(parser, args, compression)
    else:
        if args.label_column or args.classes is not None:
            parser.error(f"{'--label_column' if args.label_column else classes.pinned_by(args)} is for plain "
                         "TFRecords: a TFDS folder's ClassLabels come from its metadata")
        try:
            info = tfds.read_json(fs.join(folder, tfds.TFDS_INFO))
            split, files, count = tfds.split_files(folder, info, args.split)
        except FeatureError as error:
            parser.error(f"TFDS folder {folder}: {error}")
        try:
            features, decoders, described = tfds.tfds_features(folder, tfds.read_json(fs.join(folder, tfds.TFDS_FEATURES)))
        except FeatureError as error:
            if not args.features:  # a --features file may leave out what has no equivalent here
                parser.error(f"TFDS folder {folder}: {error}")
            features, decoders, described = None, {}, {}
        try:
            metadata["tfds"] = tfds.tfds_metadata(info, split, files, count, described)
        except FeatureError as error:
            parser.error(f"TFDS folder {folder}: {error}")
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
                | "ReadRecords" >> tfrecord_io.ReadTFRecords(compression, batch_size=args.batch_size,
                                                            batch_bytes=DEFAULT_BATCH_BYTES)
                | "ToExamples" >> beam.ParDo(_ToExamplesFn(features, decoders)))

    return common.Conversion(options, args, read, features, metadata)


if __name__ == "__main__":
    common.run_script(__spec__.name)
