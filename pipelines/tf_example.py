"""`tf.train.Example` records parsed without TensorFlow, and converted to example dicts.

The schema (tensorflow/core/example/example.proto and feature.proto, down to
SequenceExample, as which an Example parses too: see `parse`) is eight small messages.
Their descriptor is built here, at import time, in a private `DescriptorPool` of
`google.protobuf` (a dependency of Beam already), and parsed by protobuf's own C parser:
no TensorFlow, no generated `_pb2.py` to keep in step with the protobuf runtime, and no
clash with a TensorFlow (or other) `tensorflow.Example` registered in the default pool
of the same process. The records come from `tfrecord_io`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from beam_shards.display import few
from beam_shards.features import Array, ClassLabel, Feature, Image, Sequence as SequenceFeature, Value, Video

KINDS = ("bytes_list", "float_list", "int64_list")
# The dtype of the values of each kind of list, as numpy reads them.
KIND_DTYPES = {"float_list": "float32", "int64_list": "int64"}
# TFDS stores some tensors as the raw bytes of the array, or those bytes zlib-compressed.
DECODERS = ("bytes", "zlib")
# The most a zlib-compressed Array of variable length may inflate to; one of fixed shape
# inflates to its own size at most. Data past that is refused before it is inflated.
MAX_INFLATED_BYTES = 256 << 20

# --- the Example schema --------------------------------------------------------------

def _schema() -> descriptor_pb2.FileDescriptorProto:
    """example.proto and feature.proto of TensorFlow, as one file of the `tensorflow` package."""
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="beam_shards/tf_example.proto", package="tensorflow",
                                               syntax="proto3")

    def message(name: str, *fields: tuple[str, int, int, int, str | None, int | None]):
        added = proto.message_type.add(name=name)
        for field_name, number, label, kind, type_name, oneof in fields:
            added.field.add(name=field_name, number=number, label=label, type=kind, type_name=type_name,
                            oneof_index=oneof)
        return added

    def map_field(parent, name: str, number: int, value_type: str) -> None:
        entry_name = "".join(part.capitalize() for part in name.split("_")) + "Entry"
        parent.field.add(name=name, number=number, label=repeated, type=field.TYPE_MESSAGE,
                         type_name=f".tensorflow.{parent.name}.{entry_name}")
        entry = parent.nested_type.add(name=entry_name)
        entry.field.add(name="key", number=1, label=optional, type=field.TYPE_STRING)
        entry.field.add(name="value", number=2, label=optional, type=field.TYPE_MESSAGE, type_name=value_type)
        entry.options.map_entry = True

    repeated, optional = field.LABEL_REPEATED, field.LABEL_OPTIONAL
    message("BytesList", ("value", 1, repeated, field.TYPE_BYTES, None, None))
    message("FloatList", ("value", 1, repeated, field.TYPE_FLOAT, None, None))
    message("Int64List", ("value", 1, repeated, field.TYPE_INT64, None, None))
    feature = message("Feature",
                      ("bytes_list", 1, optional, field.TYPE_MESSAGE, ".tensorflow.BytesList", 0),
                      ("float_list", 2, optional, field.TYPE_MESSAGE, ".tensorflow.FloatList", 0),
                      ("int64_list", 3, optional, field.TYPE_MESSAGE, ".tensorflow.Int64List", 0))
    feature.oneof_decl.add(name="kind")
    map_field(message("Features"), "feature", 1, ".tensorflow.Feature")
    message("FeatureList", ("feature", 1, repeated, field.TYPE_MESSAGE, ".tensorflow.Feature", None))
    map_field(message("FeatureLists"), "feature_list", 1, ".tensorflow.FeatureList")
    message("SequenceExample", ("context", 1, optional, field.TYPE_MESSAGE, ".tensorflow.Features", None),
            ("feature_lists", 2, optional, field.TYPE_MESSAGE, ".tensorflow.FeatureLists", None))
    return proto


def _message_class(pool: descriptor_pool.DescriptorPool, name: str) -> type:
    descriptor = pool.FindMessageTypeByName(name)
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


_POOL = descriptor_pool.DescriptorPool()
_POOL.AddSerializedFile(_schema().SerializeToString())
# Records are parsed as SequenceExamples: `context` is field 1 as an Example's `features` is,
# so an Example reads the same, and a SequenceExample shows by its `feature_lists` (field 2),
# which parsing it as an Example would drop without a word.
_Record = _message_class(_POOL, "tensorflow.SequenceExample")


class SequenceExampleError(ValueError):
    """A record is a `tf.train.SequenceExample` with feature_lists, which cannot be converted."""


def parse(data: bytes) -> Mapping[str, Any]:
    """The features of a serialized `tf.train.Example`: a mapping of name to Feature message.

    Raises:
      SequenceExampleError: `data` is a serialized SequenceExample with feature_lists.
      ValueError: `data` is not a serialized Example.
    """
    try:
        record = _Record.FromString(data)
    except DecodeError as error:
        raise ValueError(f"is not a tf.train.Example ({error})") from None
    if record.HasField("feature_lists"):
        names = sorted(record.feature_lists.feature_list)
        raise SequenceExampleError(
            "this file holds tf.train.SequenceExample records (this one has "
            f"{'the feature_lists ' + few(names) if names else 'an empty feature_lists'}); they are not supported: "
            "converting them as tf.train.Example records would lose their feature_lists")
    return record.context.feature


def kind_and_values(feature: Any) -> tuple[str | None, Sequence[Any]]:
    """`(kind, values)` of a Feature message: kind is bytes_list, float_list, int64_list or
    None (a Feature that sets none, which TensorFlow reads as an empty list)."""
    kind = feature.WhichOneof("kind")
    return kind, (getattr(feature, kind).value if kind else ())


def inspect(data: bytes) -> dict[str, tuple[str | None, list[Any]]]:
    """Every feature of a serialized Example as `{name: (kind, list of values)}`."""
    return {name: (kind, list(values)) for name, (kind, values) in
            ((name, kind_and_values(feature)) for name, feature in parse(data).items())}


# --- Example to example dict ---------------------------------------------------------

_Convert = Callable[[str | None, Sequence[Any]], Any]


class _Mismatch(ValueError):
    """A value does not fit its feature; the column adds the feature's name."""


def _kind_error(kind: str | None, wanted: str) -> _Mismatch:
    return _Mismatch(f"is {'a Feature with no list' if kind is None else 'a ' + kind}, expected {wanted}")


def _text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _Mismatch(f"is not UTF-8 text (byte {error.start})") from None


def _item_converter(feature: Feature) -> Callable[[str | None, Any], Any]:
    """How one value of a list becomes a value of `feature` (a scalar feature)."""
    if isinstance(feature, (Image, Video)) or (isinstance(feature, Value) and feature.dtype == "binary"):
        def binary(kind, value):
            if kind != "bytes_list":
                raise _kind_error(kind, "a bytes_list")
            return value
        return binary
    if isinstance(feature, Value) and feature.dtype == "string":
        def text(kind, value):
            if kind != "bytes_list":
                raise _kind_error(kind, "a bytes_list")
            return _text(value)
        return text
    if isinstance(feature, ClassLabel):
        def label(kind, value):
            if kind == "bytes_list":
                return _text(value)
            if kind != "int64_list":
                raise _kind_error(kind, "an int64_list of class ids or a bytes_list of class names")
            # TFDS writes -1 for "no label"; it is stored as null where the feature allows it.
            return None if value == -1 and feature.nullable else value
        return label
    if isinstance(feature, Value) and feature.dtype == "bool":
        def boolean(kind, value):
            if kind != "int64_list" or value not in (0, 1):
                raise _Mismatch(f"holds {value!r} in a {kind}, expected 0 or 1 in an int64_list for a bool")
            return bool(value)
        return boolean
    if isinstance(feature, Value) and feature.dtype.startswith("float"):
        def number(kind, value):
            if kind not in ("float_list", "int64_list"):
                raise _kind_error(kind, "a float_list")
            return value
        return number
    if isinstance(feature, Value):
        def integer(kind, value):
            if kind != "int64_list":
                raise _kind_error(kind, "an int64_list")
            return value
        return integer
    raise ValueError(f"{feature!r} cannot be read from a tf.train.Example value")


def _inflate(data: bytes, limit: int, variable: bool) -> bytes:
    """`data` zlib-inflated, refused once it passes `limit` bytes: never more is inflated."""
    inflater = zlib.decompressobj()
    try:
        inflated = inflater.decompress(data, limit + 1)
    except zlib.error as error:
        raise _Mismatch(f"cannot be decompressed ({error})") from None
    if len(inflated) > limit:
        most = "the most a variable-length array may take" if variable else "the size of the array"
        raise _Mismatch(f"is zlib data that inflates past {limit:,} bytes, {most}")
    if not inflater.eof:
        raise _Mismatch("cannot be decompressed (the zlib stream is incomplete or truncated)")
    return inflated


def _array_converter(feature: Array, decoder: str | None) -> _Convert:
    row_size = math.prod(feature.shape[1:])
    size = None if feature.variable else math.prod(feature.shape)
    tail = feature.shape[1:]
    itemsize = np.dtype(feature.dtype).itemsize

    def convert(kind, values):
        if decoder is not None:
            if kind != "bytes_list" or len(values) != 1:
                raise _Mismatch(f"is {len(values)} value(s) of a {kind}, expected one bytes_list value "
                                f"holding the array's {decoder}")
            data = values[0]
            if decoder == "zlib":
                data = _inflate(data, MAX_INFLATED_BYTES if size is None else size * itemsize, size is None)
            if len(data) % itemsize:
                raise _Mismatch(f"holds {len(data)} bytes, not a whole number of {feature.dtype} values")
            flat = np.frombuffer(data, dtype=np.dtype(feature.dtype).newbyteorder("<"))
        else:
            if kind not in KIND_DTYPES and not (kind is None and not values):
                raise _kind_error(kind, "an int64_list or a float_list")
            flat = np.fromiter(values, dtype=KIND_DTYPES.get(kind, feature.dtype), count=len(values))
        count = len(flat)
        if (size is not None and count != size) or (size is None and count % row_size):
            wanted = f"{size}" if size is not None else f"a multiple of {row_size}"
            raise _Mismatch(f"holds {count} values, {feature!r} needs {wanted}")
        return flat.reshape(feature.shape if size is not None else (-1, *tail))
    return convert


def converter(feature: Feature, decoder: str | None = None) -> _Convert:
    """How the `(kind, values)` of one Example feature become the value of `feature`.

    `decoder` ("bytes" or "zlib") reads an Array stored as its raw bytes, as TFDS does
    for tensors with such an encoding. The result raises ValueError when the values do
    not fit the feature.
    """
    if isinstance(feature, Array):
        return _array_converter(feature, decoder)
    if isinstance(feature, SequenceFeature):
        child = feature.feature
        if isinstance(child, Array):
            if child.variable:
                raise ValueError(f"{feature!r}: a Sequence of variable-length Arrays has no tf.train.Example form")
            rows = _array_converter(Array((None, *child.shape), child.dtype), decoder)
            return lambda kind, values: list(rows(kind, values))
        item = _item_converter(child)
        return lambda kind, values: [item(kind, value) for value in values]
    item = _item_converter(feature)

    def scalar(kind, values):
        if len(values) == 1:
            return item(kind, values[0])
        if not values and feature.nullable:
            return None
        raise _Mismatch(f"holds {len(values)} values, expected one")
    return scalar


class ExampleReader:
    """Turns serialized Examples into example dicts for `features`.

    Args:
      features: the features to read; other features of a record are left out.
      decoders: feature name -> "bytes" or "zlib", for Arrays stored as their raw bytes.

    Raises:
      ValueError: a feature that no tf.train.Example value can hold.
    """

    def __init__(self, features: Mapping[str, Feature], decoders: Mapping[str, str] | None = None):
        decoders = decoders or {}
        self._columns = [(name, feature.nullable, feature, converter(feature, decoders.get(name)))
                         for name, feature in features.items()]

    def table(self, examples: Sequence[Mapping[str, Any]]) -> pa.Table:
        """The example dicts this reader returned, as Arrow columns in their natural types,
        for `Features.encode_batch` to cast safely and check.

        Raises:
          pa.ArrowException, TypeError, ValueError: the values do not make one column.
        """
        return pa.Table.from_arrays([_column(feature, [example[name] for example in examples])
                                     for name, _, feature, _ in self._columns],
                                    names=[name for name, *_ in self._columns])

    def __call__(self, data: bytes) -> dict[str, Any]:
        """The example dict of one record. Raises ValueError naming the feature that does not fit."""
        found = parse(data)
        example = {}
        for name, nullable, feature, convert in self._columns:
            if name not in found:
                if not nullable:
                    raise ValueError(f"has no feature {name!r} ({feature!r})")
                example[name] = None
                continue
            try:
                example[name] = convert(*kind_and_values(found[name]))
            except _Mismatch as error:
                raise ValueError(f"feature {name!r} ({feature!r}) {error}") from None
        return example


def _column(feature: Feature, values: list[Any]) -> pa.Array:
    if isinstance(feature, Array):
        return feature.build_array(values)  # arrays of the values' own dtype: nothing is cast here
    if isinstance(feature, SequenceFeature):
        lengths = np.fromiter((0 if value is None else len(value) for value in values), np.int64, len(values))
        flat = [item for value in values if value is not None for item in value]
        nulls = [value is None for value in values]
        return pa.LargeListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(lengths)])),
                                             _column(feature.feature, flat),
                                             mask=pa.array(nulls) if any(nulls) else None)
    if isinstance(feature, (Image, Video)) or (isinstance(feature, Value) and feature.dtype == "binary"):
        return pa.array(values, pa.large_binary())
    return pa.array(values)
