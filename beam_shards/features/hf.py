"""Hugging Face datasets' features and ours, each to the other, in the JSON form
`datasets.Features.to_dict()` gives and `datasets.Features.from_dict` takes (so nothing
here imports `datasets`).

| Hugging Face | here | back |
|---|---|---|
| `Value(dtype)`, any dtype `Value` takes | `Value(dtype)` | the same |
| `ClassLabel(names=...)` (`num_classes=n` names "0".."n-1") | `ClassLabel(names=...)` | the same |
| `List(f)`, `Sequence(f)` | `Sequence(f)` | `List(f)` |
| `List(Value(number), length=n)` | `Array((n,), dtype)` | the same |
| `Array2D`..`Array5D(shape, dtype)`, first dim None or not | `Array(shape, dtype)` | the same |
| a dict of features (and `Sequence` of a dict, which HF makes a dict of lists) | `Struct` | a dict |
| `Image()`, `Video()`, `Audio(sampling_rate)` | `Image()`, `Video()`, `Audio(sampling_rate)` | the same |
| `LargeList(f)` | `Sequence(f)` | `List(f)` (stored alike here) |

Every feature from Hugging Face is nullable, as Hugging Face columns are. `Array((None,),
dtype)` (variable, one dimension) goes to Hugging Face as `List(Value(dtype))`. Kinds with
no equal here (`Translation`, `Json`, `Pdf`, a fixed-length list of non-numbers, an image
`mode` or `decode=False`...) are refused, naming the column.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.errors import FeatureError
from beam_shards.features.array import Array
from beam_shards.features.base import NUMERIC_DTYPES, Feature, list_lengths
from beam_shards.features.columns import numpy_values
from beam_shards.features.files import Audio, Image, Video
from beam_shards.features.schema import Features
from beam_shards.features.sequence import Sequence
from beam_shards.features.struct import Struct
from beam_shards.features.value import ClassLabel, Value

HF_METADATA_KEY = b"huggingface"
# ClassLabel(num_classes=n) goes to HF as n names "0".."n-1": past this, too many to list.
_MAX_HF_CLASSES = 1_000_000
_ARRAY_KINDS = {f"Array{n}D": n for n in range(2, 6)}
_FILES = {"Image": Image, "Video": Video}


def from_hf_dict(spec: Mapping[str, Any]) -> Features:
    """Our features for Hugging Face features in their dict form (`datasets.Features.to_dict()`).

    Raises:
      FeatureError: a feature with no equal here, naming its column.
    """
    if not isinstance(spec, Mapping) or not spec:
        raise FeatureError(f"Hugging Face features must be a non-empty dict of columns; got {spec!r}")
    return Features({name: _from_hf(item, name) for name, item in spec.items()})


def to_hf_dict(features: Features) -> dict[str, Any]:
    """The Hugging Face features (dict form) that hold what `features` hold.

    Raises:
      FeatureError: a feature with no equal in Hugging Face datasets (an Array of more
        than 5 dimensions), naming its column.
    """
    return {name: _to_hf(feature, name) for name, feature in features.items()}


def hf_schema_metadata(features: Features) -> dict[bytes, bytes]:
    """The `huggingface` entry of an Arrow schema's metadata for `features`, as HF writes it; none
    when a feature has no HF equal."""
    try:
        hf = to_hf_dict(features)
    except FeatureError:
        return {}
    return {HF_METADATA_KEY: json.dumps({"info": {"features": hf}}, separators=(",", ":")).encode("utf-8")}


def _from_hf(spec: Any, where: str) -> Feature:
    if isinstance(spec, list) and len(spec) == 1:  # the legacy [feature] form of a list
        spec = {"_type": "List", "feature": spec[0]}
    if not isinstance(spec, Mapping):
        raise FeatureError(f"column {where!r}: {spec!r} is not a Hugging Face feature")
    kind = spec.get("_type")
    if kind is None:
        return Struct({name: _from_hf(item, f"{where}.{name}") for name, item in spec.items()}, nullable=True)
    extra = {key for key, value in spec.items() if key not in _KNOWN_KEYS.get(kind, ()) and value is not None}
    if kind in _KNOWN_KEYS and extra - _HARMLESS.get(kind, set()):
        raise FeatureError(f"column {where!r}: Hugging Face {kind} with {', '.join(sorted(extra))} has no equal here")
    if kind == "Value":
        try:
            return Value(spec["dtype"], nullable=True)
        except FeatureError:
            raise FeatureError(f"column {where!r}: Hugging Face Value({spec['dtype']!r}) has no equal here") from None
    if kind == "ClassLabel":
        return ClassLabel(names=list(spec["names"]), nullable=True)
    if kind in ("List", "Sequence", "LargeList"):
        item = _from_hf(spec["feature"], f"{where}[]")
        length = spec.get("length", -1)
        if length in (-1, None):
            return Sequence(item, nullable=True)
        if isinstance(item, Value) and item.dtype in NUMERIC_DTYPES:
            return Array((int(length),), item.dtype, nullable=True)
        raise FeatureError(f"column {where!r}: a Hugging Face list of {length} {item!r} items has no equal here "
                           "(fixed lengths are kept for numbers only)")
    if kind in _ARRAY_KINDS:
        return Array(tuple(spec["shape"]), spec["dtype"], nullable=True)
    if kind in _FILES:
        return _FILES[kind](nullable=True)
    if kind == "Audio":
        return Audio(spec.get("sampling_rate"), nullable=True)
    raise FeatureError(f"column {where!r}: Hugging Face {kind} has no equal here (see beam_shards.features.hf for the "
                       "kinds that map)")


# The keys of each kind's dict form that map; _HARMLESS ones are taken at their defaults only.
_KNOWN_KEYS = {"Value": {"_type", "dtype", "id"}, "ClassLabel": {"_type", "names", "num_classes", "id"},
               "List": {"_type", "feature", "length", "id"}, "Sequence": {"_type", "feature", "length", "id"},
               "LargeList": {"_type", "feature", "id"}, "Image": {"_type", "id"}, "Video": {"_type", "id"},
               "Audio": {"_type", "sampling_rate", "id"},
               **{kind: {"_type", "shape", "dtype", "id"} for kind in _ARRAY_KINDS}}
_HARMLESS = {kind: {"decode"} for kind in ("Image", "Video", "Audio")}


def _to_hf(feature: Feature, where: str) -> Any:
    if isinstance(feature, Value):
        return {"dtype": feature.dtype, "_type": "Value"}
    if isinstance(feature, ClassLabel):
        if feature.names is None and feature.num_classes > _MAX_HF_CLASSES:
            raise FeatureError(f"column {where!r}: Hugging Face's ClassLabel keeps a name per class; "
                               f"{feature.num_classes:,} classes have no equal there")
        return {"names": list(feature.names or map(str, range(feature.num_classes))), "_type": "ClassLabel"}
    if isinstance(feature, Sequence):
        return {"feature": _to_hf(feature.feature, f"{where}[]"), "_type": "List"}
    if isinstance(feature, Struct):
        return {name: _to_hf(item, f"{where}.{name}") for name, item in feature.fields.items()}
    if isinstance(feature, Array):
        if len(feature.shape) == 1:
            item = {"dtype": feature.dtype, "_type": "Value"}
            return {"feature": item, "_type": "List", **({} if feature.variable else {"length": feature.shape[0]})}
        if len(feature.shape) > 5:
            raise FeatureError(f"column {where!r}: {feature!r} has no equal in Hugging Face datasets (Array5D at most)")
        return {"shape": list(feature.shape), "dtype": feature.dtype, "_type": f"Array{len(feature.shape)}D"}
    if isinstance(feature, Audio):
        return {"sampling_rate": feature.sampling_rate, "_type": "Audio"}
    if isinstance(feature, (Image, Video)):
        return {"_type": type(feature).__name__}
    raise FeatureError(f"column {where!r}: {feature!r} has no equal in Hugging Face datasets")


def hf_array_storage(array: pa.Array, feature: Array) -> pa.Array:
    """A column of `feature` (as stored here: a flat fixed-size list, or a list of them when the
    first dimension varies) as Hugging Face stores an ArrayND: lists nested to its shape."""
    values, lengths = array, None
    if feature.variable:
        lengths = list_lengths(array)
        values = array.flatten()
    values = values.flatten()
    for size in reversed(feature.shape[1:]):
        values = pa.ListArray.from_arrays(pa.array(np.arange(len(values) // size + 1, dtype=np.int32) * size), values)
    if lengths is None:  # a null row holds no values (flatten leaves its slots out)
        lengths = np.where(numpy_values(array.is_null()), 0, feature.shape[0]) if array.null_count else np.full(
            len(array), feature.shape[0], dtype=np.int64)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, values, mask=array.is_null() if array.null_count else None)


def storage_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with every extension type in it (Hugging Face's ArrayND) replaced by its storage
    type, which the features here check and cast."""
    return pa.schema([field.with_type(_storage_type(field.type)) for field in schema], metadata=schema.metadata)


def _storage_type(arrow_type: pa.DataType) -> pa.DataType:
    if isinstance(arrow_type, pa.ExtensionType):
        return _storage_type(arrow_type.storage_type)
    if pa.types.is_struct(arrow_type):
        return pa.struct([arrow_type.field(i).with_type(_storage_type(arrow_type.field(i).type))
                          for i in range(arrow_type.num_fields)])
    if pa.types.is_fixed_size_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(_storage_type(arrow_type.value_type)), arrow_type.list_size)
    if pa.types.is_large_list(arrow_type):
        return pa.large_list(arrow_type.value_field.with_type(_storage_type(arrow_type.value_type)))
    if pa.types.is_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(_storage_type(arrow_type.value_type)))
    return arrow_type
