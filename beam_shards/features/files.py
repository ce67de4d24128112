"""Encoded files: `Image`, `Video` and `Audio`, kept as the file's bytes in a `large_binary` column.

A path or URI given as a value is read through `fs` (local paths, `file://`, and any
scheme Beam's FileSystems knows, such as gs:// and s3://), byte for byte. A dict
`{"bytes": ..., "path": ...}`, and an Arrow struct column of them, is a file as Hugging
Face datasets store one: its bytes, or the file at its path when it has none.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.display import human_size
from beam_shards.errors import FeatureError
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

    def to_hf_form(self, where: str) -> dict[str, Any]:
        return {"_type": type(self).__name__}

    @classmethod
    def from_hf_form(cls, spec: Mapping[str, Any], item: Feature | None) -> Feature:
        return cls(nullable=True)

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

    _expected = "expected the file's bytes or a path"  # what `_to_bytes` says of a value it cannot take

    def _to_bytes(self, value: Any) -> bytes:
        """The file's bytes that `value` gives; raises ValueError or OSError."""
        data = self._bytes_or_file(value)
        if data is None:
            raise ValueError(self._expected)
        return data

    def _check_values(self, array: pa.Array, field: str) -> None:
        for row, data in enumerate(array.to_pylist()):
            if data is not None:
                try:
                    self.check_bytes(data)
                except ValueError as error:
                    raise Invalid(str(error), field, self, data, row) from None

    def _batch_sources(self) -> tuple[str, ...]:
        return ("binary", "struct")

    def _cast_array(self, array: pa.Array, field: str) -> pa.Array:
        if pa.types.is_struct(array.type):
            array = self._struct_bytes(array, field)
        return super()._cast_array(array, field)

    def _struct_bytes(self, array: pa.StructArray, field: str) -> pa.Array:
        """The bytes of a column of `{bytes, path}` structs (Hugging Face's storage), each file
        without bytes read from its path."""
        names = [array.type.field(i).name for i in range(array.type.num_fields)]
        if "bytes" not in names or not set(names) <= {"bytes", "path"}:
            raise Invalid(f"a struct column of fields {', '.join(names)} cannot hold {self!r} values (a struct "
                          "of bytes and path can)", field, self, None)
        data = pc.struct_field(array, "bytes")
        if not pc.any(pc.and_(array.is_valid(), data.is_null())).as_py():  # every file has its bytes: no copy
            return data if array.null_count == 0 else pc.if_else(array.is_valid(), data, pa.scalar(None, data.type))
        values = []
        for row, item in enumerate(array.to_pylist()):
            try:
                values.append(None if item is None else self._hf_bytes(item))
            except (ValueError, OSError) as error:
                raise Invalid(str(error), field, self, item, row) from None
        return pa.array(values, pa.large_binary())

    def _hf_bytes(self, value: Mapping[str, Any]) -> bytes:
        if value.get("bytes") is not None:
            return bytes(value["bytes"])
        if value.get("path") is not None:
            return fs.read_bytes(value["path"])
        raise ValueError(f"{type(self).__name__.lower()} dict has neither bytes nor path")

    def _bytes_or_file(self, value: Any) -> bytes | None:
        """`value` itself when it is bytes, the file it names when it is a path or URI, or the
        bytes (else the file) of a `{"bytes", "path"}` dict; else None.

        Raises:
          OSError: the file cannot be read.
        """
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        if isinstance(value, (str, os.PathLike)):
            return fs.read_bytes(value)
        if isinstance(value, Mapping) and ("bytes" in value or "path" in value):
            return self._hf_bytes(value)
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

    hf_keys = {"Image": frozenset({"decode"})}  # decoding is the reader's choice here (`image_mode`)

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
        if isinstance(value, np.ndarray):
            return image_codec.encode_array(value)
        if type(value).__module__.startswith("PIL."):
            return image_codec.encode_pil(value)
        raise ValueError("expected image bytes, a path, a PIL image or a uint8 numpy array")


@kind
class Video(_EncodedFile):
    """An encoded video, stored as its file bytes: give the bytes or a path/URI."""

    hf_keys = {"Video": frozenset({"decode"})}
    _expected = "expected video bytes or a path"

    def check_bytes(self, data: bytes) -> None:
        if not data:
            raise ValueError("empty video")

    def _describe(self, value: bytes, limit: int) -> str:
        return f"video, {human_size(len(value))}"


@kind
class Audio(_EncodedFile):
    """An encoded audio file (WAV, FLAC, MP3...), stored as its bytes: give the bytes, a path or
    URI, or a `{"bytes", "path"}` dict as Hugging Face datasets store audio.

    Decoding is left to the reader (`soundfile`, `torchaudio`...): the bytes come back as they went in.

    Args:
      sampling_rate: the rate the audio is meant to be read at (kept as metadata), or None.
      nullable: whether None is a valid value.
    """

    def __init__(self, sampling_rate: int | None = None, *, nullable: bool = True):
        if sampling_rate is not None and (isinstance(sampling_rate, bool) or not isinstance(sampling_rate, int)
                                          or sampling_rate < 1):
            raise FeatureError(f"Audio sampling_rate must be a positive int or None; got {sampling_rate!r}")
        super().__init__(nullable=nullable)
        self.sampling_rate = sampling_rate

    def to_dict(self) -> dict[str, Any]:
        return {"_type": "Audio", "sampling_rate": self.sampling_rate, "nullable": self.nullable}

    hf_keys = {"Audio": frozenset({"sampling_rate", "decode"})}

    def to_hf_form(self, where: str) -> dict[str, Any]:
        return {"sampling_rate": self.sampling_rate, "_type": "Audio"}

    @classmethod
    def from_hf_form(cls, spec: Mapping[str, Any], item: Feature | None) -> Audio:
        return cls(spec.get("sampling_rate"), nullable=True)

    def __repr__(self) -> str:
        rate = "" if self.sampling_rate is None else f"sampling_rate={self.sampling_rate}"
        return f"Audio({', '.join(filter(None, [rate, self._nullable_repr().lstrip(', ')]))})"

    _expected = ("expected encoded audio: bytes, a path, or a {bytes, path} dict (decoded samples must be "
                 "encoded, as WAV or FLAC, first)")

    def check_bytes(self, data: bytes) -> None:
        if not data:
            raise ValueError("empty audio file")
