"""Encoded files: `Image`, `Video` and `Audio`, kept as the file's bytes in a `large_binary` column.

A path or URI given as a value is read through `fs` (local paths, `file://`, and any
scheme Beam's FileSystems knows, such as gs:// and s3://), byte for byte. A dict
`{"bytes": ..., "path": ...}`, and an Arrow struct column of them, is a file as Hugging
Face datasets store one: its bytes, or the file at its path when it has none.

A kind made with `keep_path=True` (as `from_hf` makes those of a Hugging Face dataset) keeps each file's
path beside its bytes, in a struct column `{bytes: large_binary, path: large_string}`, so that
`to_hf()` gives Hugging Face the paths it had; readers here read the bytes alone either way.
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


# The column of a kind that keeps paths: each file's bytes and the path it came from (or None).
_WITH_PATH = pa.struct([pa.field("bytes", pa.large_binary()), pa.field("path", pa.large_string())])


class _EncodedFile(Feature):
    """A file's bytes in a `large_binary` column (nullable by default), or with its path in a struct.

    Args:
      nullable: whether None is a valid value.
      decode: whether Hugging Face decodes the values (`to_hf()` gives its feature
        `decode=False` when not); here the reader chooses (`image_mode`).
      keep_path: keep each file's path beside its bytes (`_WITH_PATH`): the path a value
        names, or the `path` of a `{"bytes", "path"}` dict, else None.
    """

    _default_nullable = True

    plain_type: type | None = bytes

    def __init__(self, *, nullable: bool = True, decode: bool = True, keep_path: bool = False):
        self.nullable = check_nullable(nullable)
        if not isinstance(decode, bool) or not isinstance(keep_path, bool):
            raise FeatureError(f"{type(self).__name__} decode and keep_path must be True or False; got "
                               f"{decode!r} and {keep_path!r}")
        self.hf_decode, self.keep_path = decode, keep_path
        if keep_path:
            self.plain_type = None  # every value is encoded into its {bytes, path} record

    def arrow_type(self) -> pa.DataType:
        return _WITH_PATH if self.keep_path else pa.large_binary()

    def to_dict(self) -> dict[str, Any]:
        return {"_type": type(self).__name__, **self._own_args(), "nullable": self.nullable, **self._file_args()}

    def _own_args(self) -> dict[str, Any]:
        """The arguments of a kind's own, in its JSON form before `nullable`."""
        return {}

    def _file_args(self) -> dict[str, Any]:
        """`decode` and `keep_path` where they are not the defaults (so forms written before them stay the same)."""
        return {**({} if self.hf_decode else {"decode": False}), **({"keep_path": True} if self.keep_path else {})}

    def __repr__(self) -> str:
        args = [f"{key}={value!r}" for key, value in self._own_args().items() if value is not None]
        args += [self._nullable_repr().lstrip(", ")] + [f"{key}={value!r}" for key, value in self._file_args().items()]
        return f"{type(self).__name__}({', '.join(filter(None, args))})"

    def to_hf_form(self, where: str) -> dict[str, Any]:
        return {**self._own_args(), **({} if self.hf_decode else {"decode": False}), "_type": type(self).__name__}

    @classmethod
    def from_hf_form(cls, spec: Mapping[str, Any], item: Feature | None) -> Feature:
        decode = spec.get("decode")
        return cls(**cls._hf_args(spec), nullable=True, decode=True if decode is None else decode)

    @classmethod
    def _hf_args(cls, spec: Mapping[str, Any]) -> dict[str, Any]:
        """A kind's own arguments from a Hugging Face form."""
        return {}

    def map_paths(self, value: Any, change: Callable[[str], str]) -> Any:
        if isinstance(value, str):
            return change(value)
        if isinstance(value, Mapping) and value.get("bytes") is None and isinstance(value.get("path"), str):
            return {**value, "path": change(value["path"])}
        return value

    def encode(self, value: Any, field: str) -> bytes | dict[str, Any]:
        try:
            data = value if type(value) is bytes else self._to_bytes(value)
            self.check_bytes(data)
        except (ValueError, OSError) as error:
            raise self._fail(str(error), field, value) from None
        return {"bytes": data, "path": _path_of(value)} if self.keep_path else data

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
        self._check_files(_bytes_of(array), field)

    def _check_files(self, array: pa.Array, field: str) -> None:
        """Checks each file of a `large_binary` column (`check_bytes`)."""
        for row, data in enumerate(array.to_pylist()):
            if data is not None:
                try:
                    self.check_bytes(data)
                except ValueError as error:
                    raise Invalid(str(error), field, self, data, row) from None

    def _batch_sources(self) -> tuple[str, ...]:
        return ("binary", "struct")

    def _cast_array(self, array: pa.Array, field: str) -> pa.Array:
        paths = None
        if pa.types.is_struct(array.type):
            if self.keep_path and array.type.get_field_index("path") >= 0:
                paths = pc.struct_field(array, "path").cast(pa.large_string())
            array = self._struct_bytes(array, field)
        data = array.cast(pa.large_binary())  # from binary or large_binary: no value changes
        if not self.keep_path:
            return data
        return pa.StructArray.from_arrays([data, pa.nulls(len(data), pa.large_string()) if paths is None else paths],
                                          fields=list(_WITH_PATH), mask=data.is_null() if data.null_count else None)

    def decode(self, array: pa.Array, image_mode: str = "pil") -> list[Any]:
        return _bytes_of(array).to_pylist()

    def row_reader(self, array: pa.Array, image_mode: str = "pil") -> Callable[[int], Any]:
        return row_getter(_bytes_of(array))

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

    hf_keys = {"Image": frozenset({"decode"})}

    def check_bytes(self, data: bytes) -> None:
        image_check.sniff_format(data)

    def _check_files(self, array: pa.Array, field: str) -> None:
        data, ends = binary_values(array)
        if len(array) == 0:
            return
        first = int(ends[0])
        bad = image_check.first_bad_image(data[first:int(ends[-1])], ends - first, null_flags(array))
        if bad is not None:
            row, reason = bad
            raise Invalid(reason, field, self, array[row].as_py(), row)

    def decode(self, array: pa.Array, image_mode: str = "pil") -> list[Any]:
        files = super().decode(array, image_mode)
        if image_mode == "bytes":
            return files
        return [None if data is None else image_codec.decode(data, image_mode) for data in files]

    def row_reader(self, array: pa.Array, image_mode: str = "pil") -> Callable[[int], Any]:
        raw = super().row_reader(array, image_mode)
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

    def __init__(self, sampling_rate: int | None = None, *, nullable: bool = True, decode: bool = True,
                 keep_path: bool = False):
        if sampling_rate is not None and (isinstance(sampling_rate, bool) or not isinstance(sampling_rate, int)
                                          or sampling_rate < 1):
            raise FeatureError(f"Audio sampling_rate must be a positive int or None; got {sampling_rate!r}")
        super().__init__(nullable=nullable, decode=decode, keep_path=keep_path)
        self.sampling_rate = sampling_rate

    def _own_args(self) -> dict[str, Any]:
        return {"sampling_rate": self.sampling_rate}

    hf_keys = {"Audio": frozenset({"sampling_rate", "decode"})}

    @classmethod
    def _hf_args(cls, spec: Mapping[str, Any]) -> dict[str, Any]:
        return {"sampling_rate": spec.get("sampling_rate")}

    _expected = ("expected encoded audio: bytes, a path, or a {bytes, path} dict (decoded samples must be "
                 "encoded, as WAV or FLAC, first)")

    def check_bytes(self, data: bytes) -> None:
        if not data:
            raise ValueError("empty audio file")


def _path_of(value: Any) -> str | None:
    """The path a file value names: itself when it is a path, the `path` of a `{"bytes", "path"}` dict."""
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    if isinstance(value, Mapping) and isinstance(value.get("path"), str):
        return value["path"]
    return None


def _bytes_of(array: pa.Array) -> pa.Array:
    """The files' bytes of a stored column (a `_WITH_PATH` struct's bytes, null where the record is)."""
    if pa.types.is_struct(array.type):
        return array.flatten()[array.type.get_field_index("bytes")]
    return array
