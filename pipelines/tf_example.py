"""TFRecord files of `tf.train.Example` records, read without TensorFlow.

A TFRecord file is a run of records, each framed as (little-endian)

    uint64 length | uint32 masked crc32c(length) | data[length] | uint32 masked crc32c(data)

where a masked CRC is `((crc >> 15 | crc << 17) + 0xa282ead8) mod 2**32`. `read_records`
checks both CRCs, and reports a corrupt record (its data CRC fails: skipped alone, the
framing is intact), a corrupt header (its length cannot be trusted: the rest of the
file is unreadable) or a truncated file as a `common.Malformed` naming the offset, so a
pipeline fails naming the file, the record and the offset, or skips it with `--skip_bad`.
`ReadTFRecords` reads files with Beam's `FileBasedSource` (one file per worker at a
time, compressed files decompressed by Beam), as Beam's own `ReadFromTFRecord` does;
that one raises an error without the file or the offset and cannot skip a record.

The Example schema (tensorflow/core/example/example.proto and feature.proto) is five
small messages. Their descriptor is built here, at import time, in a private
`DescriptorPool` of `google.protobuf` (a dependency of Beam already), and parsed by
protobuf's own C parser: no TensorFlow, no generated `_pb2.py` to keep in step with the
protobuf runtime, and no clash with a TensorFlow (or other) `tensorflow.Example`
registered in the default pool of the same process.
"""

from __future__ import annotations

import functools
import logging
import math
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filebasedsource import FileBasedSource, ReadAllFiles
from apache_beam.io.filesystem import CompressionTypes
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from beam_shards.features import Array, ClassLabel, Feature, Image, Sequence as SequenceFeature, Value, Video
from pipelines import common

_LOGGER = logging.getLogger(__name__)

KINDS = ("bytes_list", "float_list", "int64_list")
# The dtype of the values of each kind of list, as numpy reads them.
KIND_DTYPES = {"float_list": "float32", "int64_list": "int64"}
COMPRESSIONS = {"auto": CompressionTypes.AUTO, "none": CompressionTypes.UNCOMPRESSED,
                "gzip": CompressionTypes.GZIP, "zlib": CompressionTypes.DEFLATE}
# TFDS stores some tensors as the raw bytes of the array, or those bytes zlib-compressed.
DECODERS = ("bytes", "zlib")

_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


# --- crc32c --------------------------------------------------------------------------

def _crc32c_function() -> Callable[[bytes], int]:
    """The fastest crc32c at hand: google-crc32c (the `tfrecord` extra), crc32c or crcmod."""
    try:
        import google_crc32c

        if google_crc32c.implementation == "c":
            return google_crc32c.value
    except ImportError:
        google_crc32c = None
    try:
        import crc32c

        return crc32c.crc32c
    except ImportError:
        pass
    try:
        import crcmod.predefined

        return crcmod.predefined.mkPredefinedCrcFun("crc-32c")
    except ImportError:
        pass
    if google_crc32c is not None:
        _LOGGER.warning("beam_shards: google-crc32c has no C extension here; checking TFRecord CRCs is slow")
        return google_crc32c.value
    raise ImportError("reading TFRecords needs a crc32c library: pip install 'beam_shards[tfrecord]' "
                      "(or google-crc32c)")


@functools.lru_cache(maxsize=None)
def _crc32c() -> Callable[[bytes], int]:
    return _crc32c_function()


def masked_crc32c(data: bytes) -> int:
    """The masked crc32c TFRecord framing stores for `data`."""
    crc = _crc32c()(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def check_crc32c() -> None:
    """Raises ImportError, saying what to install, when no crc32c library is at hand."""
    _crc32c()


# --- framing -------------------------------------------------------------------------

def _read(handle: BinaryIO, size: int) -> bytes:
    data = handle.read(size)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = handle.read(size - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def read_records(handle: BinaryIO) -> Iterator[tuple[int, int, bytes | common.Malformed]]:
    """`(record number, byte offset, data or Malformed)` for each record of a TFRecord stream.

    Record numbers count from 0. A record whose data fails its CRC is a `Malformed`
    and reading goes on; a header that fails its CRC or a truncated record ends the
    stream with a `Malformed`, since no later record can be found reliably.
    """
    offset = number = 0
    while True:
        header = _read(handle, _HEADER.size)
        if not header:
            return
        if len(header) < _HEADER.size:
            yield number, offset, common.Malformed(
                f"the file is truncated: it ends {len(header)} bytes into a record header of {_HEADER.size}")
            return
        length, length_crc = _HEADER.unpack(header)
        if masked_crc32c(header[:8]) != length_crc:
            what = "this is not a TFRecord file" if offset == 0 else "corrupt record header"
            yield number, offset, common.Malformed(
                f"{what}: the CRC of the record's length does not match, so the rest of the file "
                "cannot be split into records and is not read")
            return
        body = _read(handle, length + _CRC.size)
        if len(body) < length + _CRC.size:
            yield number, offset, common.Malformed(
                f"the file is truncated: the record holds {length:,} bytes but the file ends "
                f"{len(body):,} bytes after its header")
            return
        data = body[:length]
        if masked_crc32c(data) != _CRC.unpack_from(body, length)[0]:
            yield number, offset, common.Malformed(
                f"corrupt record: the CRC of its {length:,} bytes of data does not match")
        else:
            yield number, offset, data
        offset += _HEADER.size + length + _CRC.size
        number += 1


def where(path: str, number: int, offset: int) -> str:
    """How errors name a record: `train.tfrecord, record 17 (offset 12345)`."""
    return f"{path}, record {number} (offset {offset})"


class _TFRecordSource(FileBasedSource):
    """One TFRecord file (not split: records can only be found from its start), read in
    batches of at most `batch_size` records and about `batch_bytes` bytes."""

    def __init__(self, path: str, compression_type: str, batch_size: int = 1, batch_bytes: int = 0):
        super().__init__(path, compression_type=compression_type, splittable=False, validate=False)
        self._batch_size = batch_size
        self._batch_bytes = batch_bytes

    def read_records(self, file_name: str, range_tracker) -> Iterator[list[tuple[str, bytes | common.Malformed]]]:
        batch, size = [], 0
        with self.open_file(file_name) as handle:
            for number, offset, data in read_records(handle):
                if not batch and not range_tracker.try_claim(offset):
                    return
                batch.append((where(file_name, number, offset), data))
                size += len(data) if isinstance(data, bytes) else 0
                if len(batch) >= self._batch_size or size >= self._batch_bytes:
                    yield batch
                    batch, size = [], 0
        if batch:
            yield batch


class ReadTFRecords(beam.PTransform):
    """A PCollection of TFRecord file paths (or glob patterns) to batches of the records of
    one file: lists of `(where, record bytes or Malformed)`, in file order. A file is read
    by one worker at a time, through Beam's `FileSystems`.

    Batching keeps Beam's cost per element off the per-record path: a batch holds at
    most `batch_size` records and about `batch_bytes` bytes of them.

    Args:
      compression_type: a Beam `CompressionTypes` value; AUTO goes by the file extension.
    """

    def __init__(self, compression_type: str = CompressionTypes.AUTO, *, batch_size: int = 1000,
                 batch_bytes: int = 16 << 20):
        super().__init__()
        self._source = functools.partial(_TFRecordSource, compression_type=compression_type, batch_size=batch_size,
                                         batch_bytes=batch_bytes)
        self._compression_type = compression_type

    def expand(self, paths: beam.PCollection) -> beam.PCollection:
        return paths | "ReadAllFiles" >> ReadAllFiles(
            splittable=False, compression_type=self._compression_type, desired_bundle_size=0, min_bundle_size=0,
            source_from_file=self._source)


def open_records(path: str, compression_type: str = CompressionTypes.AUTO) -> Iterator[tuple[str, bytes | common.Malformed]]:
    """The `(where, data or Malformed)` records of one file, read here (for inference)."""
    source = _TFRecordSource(path, compression_type)
    with source.open_file(path) as handle:
        for number, offset, data in read_records(handle):
            yield where(path, number, offset), data


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

    repeated, optional = field.LABEL_REPEATED, field.LABEL_OPTIONAL
    message("BytesList", ("value", 1, repeated, field.TYPE_BYTES, None, None))
    message("FloatList", ("value", 1, repeated, field.TYPE_FLOAT, None, None))
    message("Int64List", ("value", 1, repeated, field.TYPE_INT64, None, None))
    feature = message("Feature",
                      ("bytes_list", 1, optional, field.TYPE_MESSAGE, ".tensorflow.BytesList", 0),
                      ("float_list", 2, optional, field.TYPE_MESSAGE, ".tensorflow.FloatList", 0),
                      ("int64_list", 3, optional, field.TYPE_MESSAGE, ".tensorflow.Int64List", 0))
    feature.oneof_decl.add(name="kind")
    features = message("Features",
                       ("feature", 1, repeated, field.TYPE_MESSAGE, ".tensorflow.Features.FeatureEntry", None))
    entry = features.nested_type.add(name="FeatureEntry")
    entry.field.add(name="key", number=1, label=optional, type=field.TYPE_STRING)
    entry.field.add(name="value", number=2, label=optional, type=field.TYPE_MESSAGE, type_name=".tensorflow.Feature")
    entry.options.map_entry = True
    message("Example", ("features", 1, optional, field.TYPE_MESSAGE, ".tensorflow.Features", None))
    return proto


def _message_class(pool: descriptor_pool.DescriptorPool, name: str) -> type:
    descriptor = pool.FindMessageTypeByName(name)
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


_POOL = descriptor_pool.DescriptorPool()
_POOL.AddSerializedFile(_schema().SerializeToString())
Example = _message_class(_POOL, "tensorflow.Example")


def parse(data: bytes) -> Mapping[str, Any]:
    """The features of a serialized `tf.train.Example`: a mapping of name to Feature message.

    Raises:
      ValueError: `data` is not a serialized Example.
    """
    try:
        return Example.FromString(data).features.feature
    except DecodeError as error:
        raise ValueError(f"is not a tf.train.Example ({error})") from None


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


def _array_converter(feature: Array, decoder: str | None) -> _Convert:
    row_size = math.prod(feature.shape[1:])
    size = None if feature.variable else math.prod(feature.shape)
    tail = feature.shape[1:]

    def convert(kind, values):
        if decoder is not None:
            if kind != "bytes_list" or len(values) != 1:
                raise _Mismatch(f"is {len(values)} value(s) of a {kind}, expected one bytes_list value "
                                f"holding the array's {decoder}")
            data = values[0]
            if decoder == "zlib":
                try:
                    data = zlib.decompress(data)
                except zlib.error as error:
                    raise _Mismatch(f"cannot be decompressed ({error})") from None
            itemsize = np.dtype(feature.dtype).itemsize
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
