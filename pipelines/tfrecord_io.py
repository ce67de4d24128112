"""TFRecord files read without TensorFlow: the record framing, its CRCs, and a Beam source.

A TFRecord file is a run of records, each framed as (little-endian)

    uint64 length | uint32 masked crc32c(length) | data[length] | uint32 masked crc32c(data)

where a masked CRC is `((crc >> 15 | crc << 17) + 0xa282ead8) mod 2**32`. `read_records`
checks both CRCs, and reports a corrupt record (its data CRC fails: skipped alone, the
framing is intact), a corrupt header (its length cannot be trusted: the rest of the
file is unreadable), a record longer than `MAX_RECORD_BYTES` (refused before it is read:
a corrupt or hostile length cannot make the reader allocate it) or a truncated file as a
`common.Malformed` naming the offset, so a pipeline fails naming the file, the record and
the offset, or skips it with `--skip_bad`.
`ReadTFRecords` reads files with Beam's `FileBasedSource` (one file per worker at a
time, compressed files decompressed by Beam), as Beam's own `ReadFromTFRecord` does;
that one raises an error without the file or the offset and cannot skip a record.
"""

from __future__ import annotations

import functools
import logging
import struct
from collections.abc import Callable, Iterator
from typing import BinaryIO

import apache_beam as beam
from apache_beam.io.filebasedsource import FileBasedSource, ReadAllFiles
from apache_beam.io.filesystem import CompressionTypes

from pipelines import common
from pipelines.where import Where

_LOGGER = logging.getLogger(__name__)

COMPRESSIONS = {"auto": CompressionTypes.AUTO, "none": CompressionTypes.UNCOMPRESSED,
                "gzip": CompressionTypes.GZIP, "zlib": CompressionTypes.DEFLATE}
_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8
# The longest record read (its data, in bytes); a longer one is refused as a corrupt header.
# Examples are far smaller: TensorFlow's own protobuf parser refuses messages past 2 GiB.
MAX_RECORD_BYTES = 256 << 20
# `_read` asks for at most this, or as much as it has read so far, at a time: a file object
# sets aside all that read(n) asks for, so a length past the file's end is never allocated.
_FIRST_READ = 1 << 20


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
    """`size` bytes of `handle`, fewer only at its end; the memory taken follows what the
    file holds, not what `size` claims."""
    data = handle.read(min(size, _FIRST_READ))
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = handle.read(min(size - got, max(got, _FIRST_READ)))
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def read_records(handle: BinaryIO,
                 max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[tuple[int, int, bytes | common.Malformed]]:
    """`(record number, byte offset, data or Malformed)` for each record of a TFRecord stream.

    Record numbers count from 0. A record whose data fails its CRC is a `Malformed`
    and reading goes on; a header that fails its CRC, one that claims more than
    `max_record_bytes` of data, or a truncated record ends the stream with a
    `Malformed`, since no later record can be found reliably. Reading takes memory for
    what the stream holds, never for what a header claims.
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
        if length > max_record_bytes:
            yield number, offset, common.Malformed(
                f"corrupt record header: it claims {length:,} bytes of data, more than the {max_record_bytes:,} "
                "a record may hold, so the rest of the file cannot be split into records and is not read")
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


def where(path: str, number: int, offset: int) -> Where:
    """A record's key, which errors show as `train.tfrecord, record 17 (offset 12345)`."""
    return Where(path, number, f"{path}, record {number} (offset {offset})")


class _TFRecordSource(FileBasedSource):
    """One TFRecord file (not split: records can only be found from its start), read in
    batches of at most `batch_size` records and about `batch_bytes` bytes."""

    def __init__(self, path: str, compression_type: str, batch_size: int = 1, batch_bytes: int = 0,
                 max_record_bytes: int = MAX_RECORD_BYTES):
        super().__init__(path, compression_type=compression_type, splittable=False, validate=False)
        self._batch_size = batch_size
        self._batch_bytes = batch_bytes
        self._max_record_bytes = max_record_bytes

    def read_records(self, file_name: str, range_tracker) -> Iterator[list[tuple[Where, bytes | common.Malformed]]]:
        batch, size = [], 0
        with self.open_file(file_name) as handle:
            for number, offset, data in read_records(handle, self._max_record_bytes):
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
      max_record_bytes: the longest record read; a longer one is a `Malformed` corrupt
        header that ends its file.
    """

    def __init__(self, compression_type: str = CompressionTypes.AUTO, *, batch_size: int = 1000,
                 batch_bytes: int = 16 << 20, max_record_bytes: int = MAX_RECORD_BYTES):
        super().__init__()
        self._source = functools.partial(_TFRecordSource, compression_type=compression_type, batch_size=batch_size,
                                         batch_bytes=batch_bytes, max_record_bytes=max_record_bytes)
        self._compression_type = compression_type

    def expand(self, paths: beam.PCollection) -> beam.PCollection:
        return paths | "ReadAllFiles" >> ReadAllFiles(
            splittable=False, compression_type=self._compression_type, desired_bundle_size=0, min_bundle_size=0,
            source_from_file=self._source)


def open_records(path: str, compression_type: str = CompressionTypes.AUTO) -> Iterator[tuple[Where, bytes | common.Malformed]]:
    """The `(where, data or Malformed)` records of one file, read here (for inference)."""
    source = _TFRecordSource(path, compression_type)
    with source.open_file(path) as handle:
        for number, offset, data in read_records(handle):
            yield where(path, number, offset), data
