"""Encoded files: `Image` and `Video`, kept as the file's bytes in a `large_binary` column.

A path or URI given as a value is read through `fs` (local paths, `file://`, and any
scheme Beam's FileSystems knows, such as gs:// and s3://), byte for byte.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.display import human_size
from beam_shards.features import image_check, image_codec
from beam_shards.features.base import Feature, Invalid, check_nullable, kind
from beam_shards.features.columns import binary_values, null_flags, row_getter
from beam_shards.storage import fs


class _EncodedFile(Feature):
    """A file's bytes in a `large_binary` column (nullable by default)."""

    _default_nullable = True

    plain_type = bytes

    def __init__(self, *, nullable: bool = True):
        self.nullable = check_nullable(nullable)

    def arrow_type(self) -> pa.DataType:
        return pa.large_binary()

    def to_dict(self) -> dict[str, Any]:
        return {"_type": type(self).__name__, "nullable": self.nullable}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._nullable_repr().lstrip(', ')})"

    def map_paths(self, value: Any, change: Callable[[str], str]) -> Any:
        if isinstance(value, str):
            return change(value)
        if isinstance(value, Mapping) and value.get("bytes") is None and isinstance(value.get("path"), str):
            return {**value, "path": change(value["path"])}
        return value

    def encode(self, value: Any, field: str) -> bytes:
        try:
            data = value if type(value) is bytes else self._to_bytes(value)
            self.check_bytes(data)
        except (ValueError, OSError) as error:
            raise self._fail(str(error), field, value) from None
        return data

    def check_bytes(self, data: bytes) -> None:
        """Raises ValueError when `data` cannot be this kind's file: the one check for a value
        given alone (`encode`) and for each row of a column (`check_array`)."""
        raise NotImplementedError

    def _to_bytes(self, value: Any) -> bytes:
        """The file's bytes that `value` gives; raises ValueError or OSError."""
        raise NotImplementedError

    def _check_values(self, array: pa.Array, field: str) -> None:
        for row, data in enumerate(array.to_pylist()):
            if data is not None:
                try:
                    self.check_bytes(data)
                except ValueError as error:
                    raise Invalid(str(error), field, self, data, row) from None

    def _bytes_or_file(self, value: Any) -> bytes | None:
        """`value` itself when it is bytes, the file it names when it is a path or URI, else None.

        Raises:
          OSError: the file cannot be read.
        """
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        if isinstance(value, (str, os.PathLike)):
            return fs.read_bytes(value)
        return None


@kind
class Image(_EncodedFile):
    """An encoded image, stored as its file bytes (`large_binary`).

    Accepts raw bytes (kept unchanged), a path or URI (read as is, so JPEG stays JPEG),
    a PIL image (saved in its own format; PNG when it has none or an alpha/palette
    mode), a uint8 numpy array HxW, HxWx1, HxWx3 or HxWx4 (saved as PNG), a dict
    ``{"bytes": ..., "path": ...}`` as Hugging Face datasets store images, or None.
    Bytes are checked to be a complete image (signature and end marker) without
    decoding the pixels.
    """

    def check_bytes(self, data: bytes) -> None:
        image_check.sniff_format(data)

    def _check_values(self, array: pa.Array, field: str) -> None:
        data, ends = binary_values(array)
        if len(array) == 0:
            return
        first = int(ends[0])
        bad = image_check.first_bad_image(data[first:int(ends[-1])], ends - first, null_flags(array))
        if bad is not None:
            row, reason = bad
            raise Invalid(reason, field, self, array[row].as_py(), row)

    def decode(self, array: pa.Array, image_mode: str = "pil") -> list[Any]:
        if image_mode == "bytes":
            return array.to_pylist()
        return [None if data is None else image_codec.decode(data, image_mode) for data in array.to_pylist()]

    def row_reader(self, array: pa.Array, image_mode: str = "pil") -> Callable[[int], Any]:
        raw = row_getter(array)
        if image_mode == "bytes":
            return raw

        def read(k: int) -> Any:
            data = raw(k)
            return None if data is None else image_codec.decode(data, image_mode)
        return read

    def _describe(self, value: bytes, limit: int) -> str:
        return image_codec.describe(value)

    def _to_bytes(self, value: Any) -> bytes:
        data = self._bytes_or_file(value)
        if data is not None:
            return data
        if isinstance(value, Mapping) and ("bytes" in value or "path" in value):
            if value.get("bytes") is not None:
                return bytes(value["bytes"])
            if value.get("path") is not None:
                return fs.read_bytes(value["path"])
            raise ValueError("image dict has neither bytes nor path")
        if isinstance(value, np.ndarray):
            return image_codec.encode_array(value)
        if type(value).__module__.startswith("PIL."):
            return image_codec.encode_pil(value)
        raise ValueError("expected image bytes, a path, a PIL image or a uint8 numpy array")


@kind
class Video(_EncodedFile):
    """An encoded video, stored as its file bytes: give the bytes or a path/URI."""

    def check_bytes(self, data: bytes) -> None:
        if not data:
            raise ValueError("empty video")

    def _to_bytes(self, value: Any) -> bytes:
        data = self._bytes_or_file(value)
        if data is None:
            raise ValueError("expected video bytes or a path")
        return data

    def _describe(self, value: bytes, limit: int) -> str:
        return f"video, {human_size(len(value))}"
