"""`Json`: any JSON value (null, a bool, a number, a string, a list, an object), kept as JSON text.

For columns whose values have no one shape (an object in one row, a list in the next), as
Hugging Face datasets' `Json` holds them. A value is checked and written as compact JSON text
(UTF-8, keys in their order) in a string column, and read back as Python values by
`json.loads`. Values nest at most `MAX_DEPTH` levels, checked without recursing both ways.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.display import clip, printable
from beam_shards.errors import CorruptCacheError, FeatureError
from beam_shards.features.base import Feature, Invalid, check_nullable, kind
from beam_shards.features.columns import row_getter
from beam_shards.features.json_text import MAX_DEPTH, load_bounded

# The Arrow type families whose values a batch column gives as JSON values (a string column gives JSON text).
_VALUE_FAMILIES = ("bool", "int", "float", "list", "struct")
_NUMPY_SCALARS = (np.bool_, np.integer, np.floating)


@kind
class Json(Feature):
    """Any JSON value: None, a bool, an int, a float, a str, a list or a dict with str keys, at any
    mix of shapes from row to row, nested at most `MAX_DEPTH` levels.

    Stored as JSON text in a string column and read back as Python values (a tuple or a
    numpy scalar given is read back as a list or a Python number). NaN and infinite floats,
    bytes, sets, dicts with keys that are not strings, and other objects are refused, naming
    where in the value they are. A batch column (`encode_batch`) of strings holds JSON text,
    taken as it is once it parses; one of bools, numbers, lists or structs holds the values.

    Example:
        >>> from beam_shards import Features, encode_example
        >>> encode_example({"extra": {"tags": ["a", 1]}}, Features({"extra": Json()}))
        {'extra': '{"tags":["a",1]}'}

    Args:
      nullable: whether None (JSON null) is a valid value; it is stored as a null.
    """

    _default_nullable = True

    def __init__(self, *, nullable: bool = True):
        self.nullable = check_nullable(nullable)

    def arrow_type(self) -> pa.DataType:
        return pa.large_string()

    def hf_type(self) -> pa.DataType:
        return pa.string()

    # Hugging Face's Json(decode=False) gives its rows as text; only decoded Json has an equal here.
    hf_keys = {"Json": frozenset({"decode"})}

    def to_hf_form(self, where: str) -> dict[str, Any]:
        return {"_type": "Json"}

    @classmethod
    def from_hf_form(cls, spec: Mapping[str, Any], item: Feature | None) -> Json:
        if spec.get("decode", True) is not True:
            raise FeatureError("Hugging Face Json(decode=False) has no equal here (Json values are read back decoded)")
        return cls(nullable=True)

    def to_dict(self) -> dict[str, Any]:
        return {"_type": "Json", "nullable": self.nullable}

    def __repr__(self) -> str:
        return f"Json({self._nullable_repr().lstrip(', ')})"

    def encode(self, value: Any, field: str) -> str:
        self._check_value(value, field)
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_numpy_item)

    def _check_value(self, value: Any, field: str) -> None:
        """Raises `Invalid` naming the first part of `value` (by its place in `field`) that is not
        JSON, or a list or dict past `MAX_DEPTH` levels. Walks level by level: never recurses."""
        level = [(field, value)]
        for depth in range(MAX_DEPTH + 1):  # the nodes of `level` sit inside `depth` lists and dicts
            inner = []
            for where, node in level:
                if isinstance(node, (list, tuple, dict)) and depth == MAX_DEPTH:
                    # Shown by its type alone: the repr of a value this deep recurses past Python's limit.
                    raise self._fail(f"nests lists and dicts more than {MAX_DEPTH} levels deep", field,
                                     f"a {type(value).__name__} nested more than {MAX_DEPTH} levels")
                if isinstance(node, (list, tuple)):
                    inner.extend((f"{where}[{i}]", item) for i, item in enumerate(node))
                elif isinstance(node, dict):
                    for key, item in node.items():
                        if not isinstance(key, str):
                            raise self._fail(f"key {clip(repr(key))}: JSON object keys are strings, not "
                                             f"{type(key).__name__}", where, node)
                        self._check_scalar(key, where, node)
                        inner.append((f"{where}[{clip(repr(key), 40)}]", item))
                else:
                    self._check_scalar(node, where, node)
            if not inner:
                return
            level = inner

    def _check_scalar(self, node: Any, where: str, shown: Any) -> None:
        if node is None or isinstance(node, (bool, int, np.bool_, np.integer)):
            return
        if isinstance(node, (float, np.floating)):
            if not math.isfinite(node):
                raise self._fail(f"{node} is not a JSON number", where, node)
            return
        if isinstance(node, str):
            if not node.isascii():
                try:
                    node.encode("utf-8")
                except UnicodeEncodeError as error:
                    raise self._fail(f"string cannot be stored as UTF-8 ({error.reason} at {error.start})",
                                     where, shown) from None
            return
        raise self._fail(f"a {type(node).__name__} is not a JSON value (JSON holds None, bool, int, float, str, "
                         "list and dict with str keys)", where, node)

    def _batch_sources(self) -> tuple[str, ...]:
        return ("string",) + _VALUE_FAMILIES

    def check_array(self, array: pa.Array | pa.ChunkedArray, field: str) -> pa.Array | pa.ChunkedArray:
        if isinstance(array.type, pa.BaseExtensionType) and array.type.extension_name == "arrow.json":
            array = array.storage if isinstance(array, pa.Array) else pa.chunked_array(
                [chunk.storage for chunk in array.chunks], array.type.storage_type)
        return super().check_array(array, field)

    def _cast_array(self, array: pa.Array, field: str) -> pa.Array:
        """A string column's JSON text checked to parse, as it is; any other column's values as JSON text."""
        if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
            for row, text in enumerate(array.to_pylist()):
                if text is not None:
                    try:
                        load_bounded(text)
                    except ValueError as error:
                        raise Invalid(f"a string column of a Json feature holds JSON text; this is not JSON "
                                      f"({error})", field, self, text, row) from None
            return array.cast(self.arrow_type())
        texts = []
        for row, value in enumerate(array.to_pylist()):
            try:
                texts.append(None if value is None else self.encode(value, field))
            except Invalid as invalid:
                invalid.row = row
                raise
        return pa.array(texts, self.arrow_type())

    def decode(self, array: pa.Array, image_mode: str = "pil") -> list[Any]:
        return [None if text is None else _read_stored(text) for text in array.to_pylist()]

    def row_reader(self, array: pa.Array, image_mode: str = "pil") -> Callable[[int], Any]:
        raw = row_getter(array)

        def read(k: int) -> Any:
            text = raw(k)
            return None if text is None else _read_stored(text)
        return read

    def _describe(self, value: Any, limit: int) -> str:
        return printable(clip(json.dumps(value, ensure_ascii=False), limit))


def _read_stored(text: str) -> Any:
    try:
        return load_bounded(text)
    except ValueError as error:
        raise CorruptCacheError(f"a Json value is stored as {clip(repr(text), 60)}, which is not JSON such a "
                                f"column holds ({error})") from None


def _numpy_item(value: Any) -> Any:
    """A numpy scalar as the Python value `json.dumps` writes (the walk has checked it is one)."""
    if isinstance(value, _NUMPY_SCALARS):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def holds_json(feature: Feature) -> bool:
    """Whether `feature` is a `Json` or holds one (in a Sequence or Struct, at any depth)."""
    level: list[Any] = [feature.to_dict()]
    while level:
        if any(isinstance(node, dict) and node.get("_type") == "Json" for node in level):
            return True
        level = [item for node in level if isinstance(node, (dict, list))
                 for item in (node.values() if isinstance(node, dict) else node)]
    return False
