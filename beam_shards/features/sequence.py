"""`Sequence`: a variable-length list of another feature."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.display import clip
from beam_shards.errors import FeatureError
from beam_shards.features.array import Array
from beam_shards.features.base import (NUMERIC_DTYPES, Feature, Invalid, check_nullable, feature_from_dict, kind,
                                       list_lengths, list_offsets, null_mask, restore_nulls, row_of)
from beam_shards.features.columns import with_nulls
from beam_shards.features.value import Value


@kind
class Sequence(Feature):
    """A variable-length list of another feature (images, arrays and sequences included)."""

    def __init__(self, feature: Feature, *, nullable: bool = False):
        if not isinstance(feature, Feature):
            raise FeatureError(f"Sequence takes a feature, like Sequence(Value('int64')); got {feature!r}")
        self.feature = feature
        self.nullable = check_nullable(nullable)

    def arrow_type(self) -> pa.DataType:
        return pa.large_list(pa.field("item", self.feature.arrow_type(), nullable=self.feature.nullable))

    def hf_type(self) -> pa.DataType:
        return pa.list_(self.feature.hf_type())

    hf_keys = {"List": frozenset({"feature", "length"}), "Sequence": frozenset({"feature", "length"}),
               "LargeList": frozenset({"feature"})}
    hf_item = "feature"

    def to_hf_form(self, where: str) -> dict[str, Any]:
        return {"feature": self.feature.to_hf_form(f"{where}[]"), "_type": "List"}

    @classmethod
    def from_hf_form(cls, spec: Mapping[str, Any], item: Feature | None) -> Feature:
        """A Sequence, or for a list of a fixed length of numbers an Array of that length."""
        length = spec.get("length", -1)
        if length in (-1, None):
            return cls(item, nullable=True)
        if isinstance(item, Value) and item.dtype in NUMERIC_DTYPES:
            return Array((length,), item.dtype, nullable=True)
        raise FeatureError(f"a Hugging Face list of {clip(repr(length))} {item!r} items has no equal here "
                           "(fixed lengths are kept for numbers only)")

    def to_dict(self) -> dict[str, Any]:
        return {"_type": "Sequence", "feature": self.feature.to_dict(), "nullable": self.nullable}

    @classmethod
    def _from_args(cls, args: dict[str, Any]) -> Sequence:
        return cls(feature_from_dict(args.pop("feature")), **args)

    def __repr__(self) -> str:
        return f"Sequence({self.feature!r}{self._nullable_repr()})"

    def encode(self, value: Any, field: str) -> list[Any]:
        if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, (list, tuple, np.ndarray)):
            raise self._fail("expected a list", field, value)
        child = self.feature
        return [child.encode_or_null(item, f"{field}[{i}]") for i, item in enumerate(value)]

    def _cast_array(self, array: pa.Array, field: str) -> pa.Array:
        """The items checked and cast by the item feature, as `encode` does item by item."""
        lengths = list_lengths(array)
        try:
            items = self.feature.check_array(array.flatten(), f"{field}[]")
        except Invalid as invalid:
            if invalid.row is not None:
                invalid.row = row_of(invalid.row, lengths)
            raise
        return pa.LargeListArray.from_arrays(list_offsets(lengths), items, type=self.arrow_type(),
                                             mask=array.is_null() if array.null_count else None)

    def build_array(self, values: list[Any]) -> pa.Array:
        mask = null_mask(values)
        lengths = np.array([0 if v is None else len(v) for v in values], dtype=np.int64)
        flat = [item for v in values if v is not None for item in v]
        child = self.feature.build_array(flat)
        return pa.LargeListArray.from_arrays(list_offsets(lengths), child, type=self.arrow_type(), mask=mask)

    def decode(self, array: pa.Array, image_mode: str = "pil") -> list[Any]:
        """A list per row of the items decoded as the item feature decodes them."""
        items = self.feature.decode(array.flatten(), image_mode)
        ends = np.cumsum(list_lengths(array)).tolist()
        starts = [0] + ends[:-1]
        return restore_nulls([items[start:end] for start, end in zip(starts, ends)], array)

    def row_reader(self, array: pa.Array, image_mode: str = "pil") -> Callable[[int], Any]:
        """One list at a time: its items read by the item feature's row reader."""
        item = self.feature.row_reader(array.flatten(), image_mode)
        ends = np.cumsum(list_lengths(array)).tolist()
        starts = [0] + ends[:-1]

        def read(k: int) -> list[Any]:
            return [item(j) for j in range(starts[k], ends[k])]
        return read if array.null_count == 0 else with_nulls(read, array)

    def map_paths(self, value: Any, change: Callable[[str], str]) -> Any:
        return [self.feature.map_paths(item, change) for item in value] if isinstance(value, list) else value

    def _describe(self, value: list[Any], limit: int) -> str:
        items = [self.feature.describe(item, limit=40) for item in value[:6]]
        more = f", ... ({len(value)} items)" if len(value) > 6 else ""
        return "[" + ", ".join(items) + more + "]"

