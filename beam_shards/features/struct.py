"""`Struct`: a record of named features (a dict of features, any depth)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.display import clip, few
from beam_shards.errors import FeatureError
from beam_shards.features.base import (Feature, Invalid, check_named, check_nullable, feature_from_dict, kind,
                                       null_mask, restore_nulls)
from beam_shards.features.columns import numpy_values, with_nulls


@kind
class Struct(Feature):
    """A record of named features, stored as an Arrow struct and read back as a dict.

    Fields may be any feature, `Struct` and `Sequence` included, so a chat turn is
    `Struct({"role": Value("string"), "content": Value("string")})` and a conversation
    `Sequence` of it. A value is a dict with the fields' names; a field that is nullable
    may be left out (it is then None), any other must be there, and a name that is not a
    field is refused.

    Example:
        >>> from beam_shards import Features, Sequence, Value, encode_example
        >>> turn = Struct({"role": Value("string"), "content": Value("string")})
        >>> features = Features({"messages": Sequence(turn)})
        >>> encode_example({"messages": [{"role": "user", "content": "hi"}]}, features)
        {'messages': [{'role': 'user', 'content': 'hi'}]}

    Args:
      fields: the features by name, in column order.
      nullable: whether None is a valid value for the whole record.

    Raises:
      FeatureError: no field, a name that is not a non-empty string or holds a control
        character, or a value that is not a feature.
    """

    def __init__(self, fields: Mapping[str, Feature], *, nullable: bool = False):
        if not isinstance(fields, Mapping) or not fields:
            raise FeatureError(f"Struct takes a dict of at least one feature, like Struct({{'x': Value('int64')}}); "
                               f"got {fields!r}")
        check_named(fields, "Struct field")
        self.fields = dict(fields)
        self.nullable = check_nullable(nullable)

    def arrow_type(self) -> pa.DataType:
        return pa.struct([pa.field(name, feature.arrow_type(), nullable=feature.nullable)
                          for name, feature in self.fields.items()])

    def hf_type(self) -> pa.DataType:
        return pa.struct([pa.field(name, feature.hf_type()) for name, feature in self.fields.items()])

    def to_hf_form(self, where: str) -> dict[str, Any]:
        """A dict of the fields' forms: Hugging Face's record (`beam_shards.hf` maps one back)."""
        return {name: feature.to_hf_form(f"{where}.{name}") for name, feature in self.fields.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"_type": "Struct", "fields": {name: f.to_dict() for name, f in self.fields.items()},
                "nullable": self.nullable}

    @classmethod
    def _from_args(cls, args: dict[str, Any]) -> Struct:
        fields = args.pop("fields")
        if not isinstance(fields, Mapping):
            raise TypeError(f"fields must be a dict of feature specs; got {fields!r}")
        return cls({name: feature_from_dict(spec) for name, spec in fields.items()}, **args)

    def __repr__(self) -> str:
        return f"Struct({{{', '.join(f'{name!r}: {f!r}' for name, f in self.fields.items())}}}{self._nullable_repr()})"

    def encode(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise self._fail("expected a dict", field, value)
        extra = [name for name in value if name not in self.fields]
        if extra:
            raise self._fail(self._not_a_field(extra[0]), field, value)
        return {name: feature.encode_or_null(value.get(name), f"{field}.{name}")
                for name, feature in self.fields.items()}

    def build_array(self, values: list[Any]) -> pa.Array:
        children = [feature.build_array([None if v is None else v[name] for v in values])
                    for name, feature in self.fields.items()]
        return pa.StructArray.from_arrays(children, fields=list(self.arrow_type()), mask=null_mask(values))

    def _batch_sources(self) -> tuple[str, ...]:
        return ("struct",)

    def _not_a_field(self, name: Any) -> str:
        return f"{clip(repr(name))} is not a field of this Struct (its fields: {few(self.fields)})"

    def _cast_array(self, array: pa.Array, field: str) -> pa.Array:
        """Each field checked and cast by its feature, as `encode` does field by field."""
        given = {array.type.field(i).name: child for i, child in enumerate(array.flatten())}
        extra = [name for name in given if name not in self.fields]
        if extra:
            raise Invalid(self._not_a_field(extra[0]), field, self, None, 0)
        # A null record's fields read as null, which are not the fields' own: only the
        # records that are there are checked, and the null ones keep null fields.
        valid = positions = None
        if array.null_count:
            is_valid = numpy_values(array.is_valid())
            valid = np.flatnonzero(is_valid)
            # Where each row's record is among the valid ones (null where the record is null).
            positions = pa.array(np.cumsum(is_valid) - 1, mask=~is_valid)
        children = []
        for name, feature in self.fields.items():
            child = given.get(name)
            if child is None:
                if not feature.nullable:
                    raise Invalid(f"has no field {name!r}, which is not nullable", field, self, None, 0)
                child = pa.nulls(len(array), feature.arrow_type())
            if valid is None:
                children.append(feature.check_array(child, f"{field}.{name}"))
                continue
            try:
                checked = feature.check_array(child.take(pa.array(valid)), f"{field}.{name}")
            except Invalid as invalid:
                if invalid.row is not None:
                    invalid.row = int(valid[invalid.row])
                raise
            children.append(checked.take(positions))
        return pa.StructArray.from_arrays(children, fields=list(self.arrow_type()),
                                          mask=None if valid is None else array.is_null())

    def decode(self, array: pa.Array, image_mode: str = "pil") -> list[Any]:
        """A dict per row of the fields decoded as their features decode them."""
        columns = [feature.decode(child, image_mode) for feature, child in zip(self.fields.values(), array.flatten())]
        names = list(self.fields)
        return restore_nulls([dict(zip(names, row)) for row in zip(*columns)] if columns else [], array)

    def row_reader(self, array: pa.Array, image_mode: str = "pil") -> Callable[[int], Any]:
        """One record at a time: each field read by its own feature's row reader."""
        readers = [(name, feature.row_reader(child, image_mode))
                   for (name, feature), child in zip(self.fields.items(), array.flatten())]

        def read(k: int) -> dict[str, Any]:
            return {name: reader(k) for name, reader in readers}
        return read if array.null_count == 0 else with_nulls(read, array)

    def map_paths(self, value: Any, change: Callable[[str], str]) -> Any:
        if not isinstance(value, Mapping):
            return value
        return {name: self.fields[name].map_paths(item, change) if name in self.fields else item
                for name, item in value.items()}

    def _describe(self, value: dict[str, Any], limit: int) -> str:
        items = [f"{name}: {feature.describe(value.get(name), limit=40)}" for name, feature in self.fields.items()]
        text = "{" + ", ".join(items) + "}"
        return text if len(text) <= limit else text[:limit - 4] + "...}"
