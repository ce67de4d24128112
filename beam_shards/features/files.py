"""Encoded files: `Image` and `Video`, kept as the file's bytes in a `large_binary` column."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards import images
from beam_shards.features.base import Feature, _Invalid


class _EncodedFile(Feature):
    """A file's bytes in a `large_binary` column (nullable by default)."""

    _default_nullable = True

    def __init__(self, *, nullable: bool = True):
        self.nullable = nullable

    def arrow_type(self) -> pa.DataType:
        return pa.large_binary()

    def to_dict(self) -> dict[str, Any]:
        return {"_type": type(self).__name__, "nullable": self.nullable}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._nullable_repr().lstrip(', ')})"


class Image(_EncodedFile):
    """An encoded image, stored as its file bytes (`large_binary`).

    Accepts raw bytes (kept unchanged), a path or URI (read as is, so JPEG stays JPEG),
    a PIL image (saved in its own format; PNG when it has none or an alpha/palette
    mode), a uint8 numpy array HxW, HxWx1, HxWx3 or HxWx4 (saved as PNG), a dict
    ``{"bytes": ..., "path": ...}`` as Hugging Face datasets store images, or None.
    Bytes are checked to be a complete image (signature and end marker) without
    decoding the pixels.
    """

    def encode(self, value: Any, field: str) -> bytes:
        try:
            data = self._to_bytes(value)
            images.sniff_format(data)
        except (ValueError, OSError) as error:
            raise self._fail(str(error), field, value) from None
        return data

    def decode(self, array: pa.Array, image_mode: str = "pil") -> list[Any]:
        if image_mode == "bytes":
            return array.to_pylist()
        return [None if data is None else images.decode(data, image_mode) for data in array.to_pylist()]

    def _check_values(self, array: pa.Array | pa.ChunkedArray, field: str) -> None:
        for row, data in enumerate(array.to_pylist()):
            if data is not None:
                try:
                    images.sniff_format(data)
                except ValueError as error:
                    raise _Invalid(str(error), field, self, data, row) from None

    def _to_bytes(self, value: Any) -> bytes:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        if isinstance(value, (str, os.PathLike)):
            return read_file(value)
        if isinstance(value, Mapping) and ("bytes" in value or "path" in value):
            if value.get("bytes") is not None:
                return bytes(value["bytes"])
            if value.get("path") is not None:
                return read_file(value["path"])
            raise ValueError("image dict has neither bytes nor path")
        if isinstance(value, np.ndarray):
            return images.encode_array(value)
        if type(value).__module__.startswith("PIL."):
            return images.encode_pil(value)
        raise ValueError("expected image bytes, a path, a PIL image or a uint8 numpy array")


class Video(_EncodedFile):
    """An encoded video, stored as its file bytes: give the bytes or a path/URI."""

    def encode(self, value: Any, field: str) -> bytes:
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
        elif isinstance(value, (str, os.PathLike)):
            try:
                data = read_file(value)
            except OSError as error:
                raise self._fail(str(error), field, value) from None
        else:
            raise self._fail("expected video bytes or a path", field, value)
        if not data:
            raise self._fail("empty video", field, value)
        return data


def read_file(path: str | os.PathLike) -> bytes:
    """Reads a whole local file, or a URI through Beam's FileSystems (gs://, s3://...)."""
    path = os.fspath(path)
    if "://" in path:
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.open(path) as handle:
            return handle.read()
    with open(path, "rb") as handle:
        return handle.read()
