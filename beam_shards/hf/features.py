"""Hugging Face datasets' features and ours, each to the other.

Each kind describes its own Hugging Face form (`Feature.hf_keys`, `to_hf_form`,
`from_hf_form` in `beam_shards.features`); this module walks a whole dict form
(`datasets.Features.to_dict()`) with them.

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
`mode`...) are refused, naming the column, and so is a form that is malformed or nested
more than `MAX_DEPTH` levels: whatever a dict form holds, the answer is our features or
one FeatureError line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from beam_shards.display import clip, printable, short_repr
from beam_shards.errors import FeatureError
from beam_shards.features import MAX_DEPTH, Feature, Features, Struct, feature_kinds, json_depth

# The kinds by the Hugging Face types they are the equals of.
_KINDS = {hf_type: kind for kind in feature_kinds() for hf_type in kind.hf_keys}
# Keys every dict form may hold: its type, and an id Hugging Face keeps for its own use.
_ANY_FORM = frozenset({"_type", "id"})
# An error message quoting a form is cut to this many characters.
_MESSAGE_LIMIT = 300


def to_hf_features(features: Features) -> Any:
    """The Hugging Face `datasets.Features` equal to `features`.

    Example:
        >>> from beam_shards import Features, Sequence, Struct, Value
        >>> to_hf_features(Features({"m": Sequence(Struct({"role": Value("string")}))}))
        {'m': List({'role': Value('string')})}

    Raises:
      FeatureError: a feature with no equal in Hugging Face datasets, naming it.
    """
    import datasets

    return datasets.Features.from_dict(features.to_hf_dict())


def from_hf_features(features: Any) -> Features:
    """Our `Features` equal to Hugging Face `datasets.Features` (or their `to_dict()` form).

    Raises:
      FeatureError: a Hugging Face feature with no equal here, naming its column.
    """
    return from_hf_dict(features if isinstance(features, Mapping) and not hasattr(features, "to_dict")
                        else features.to_dict())


def from_hf_dict(spec: Any) -> Features:
    """Our features for Hugging Face features in their dict form (`datasets.Features.to_dict()`).

    Raises:
      FeatureError: not a dict of columns, nested more than `MAX_DEPTH` levels, or a feature
        that is malformed or has no equal here, naming its column.
    """
    if not isinstance(spec, Mapping) or not spec:
        raise FeatureError(f"Hugging Face features must be a non-empty dict of columns; got {short_repr(spec)}")
    depth = json_depth(dict(spec))
    if depth > MAX_DEPTH:
        raise FeatureError(f"Hugging Face features nested {depth:,} levels deep; at most {MAX_DEPTH} are read")
    columns = {name: _feature(item, name) for name, item in spec.items()}
    return _built("", "features", lambda: Features(columns))


def _feature(spec: Any, where: str) -> Feature:
    if isinstance(spec, list) and len(spec) == 1:  # the legacy [feature] form of a list
        spec = {"_type": "List", "feature": spec[0]}
    if not isinstance(spec, Mapping):
        raise FeatureError(f"column {where!r}: {short_repr(spec)} is not a Hugging Face feature")
    hf_type = spec.get("_type")
    if hf_type is None:
        fields = {name: _feature(item, f"{where}.{name}") for name, item in spec.items()}
        return _built(where, "dict of features", lambda: Struct(fields, nullable=True))
    kind = _KINDS.get(hf_type) if isinstance(hf_type, str) else None
    if kind is None:
        raise FeatureError(f"column {where!r}: Hugging Face {clip(printable(str(hf_type)))} has no equal here "
                           "(see beam_shards.hf.features for the kinds that map)")
    known = kind.hf_keys[hf_type] | _ANY_FORM
    extra = sorted(printable(str(key)) for key, value in spec.items() if key not in known and value is not None)
    if extra:
        raise FeatureError(f"column {where!r}: Hugging Face {hf_type} with {clip(', '.join(extra))} has no equal here")
    item = None
    if kind.hf_item is not None:
        if kind.hf_item not in spec:
            raise FeatureError(f"column {where!r}: a Hugging Face {hf_type} without its {kind.hf_item!r}")
        item = _feature(spec[kind.hf_item], f"{where}[]")
    return _built(where, hf_type, lambda: kind.from_hf_form(spec, item))


def _built(where: str, what: str, build: Callable[[], Any]) -> Any:
    """What `build` (one feature's own step, its inner features mapped) returns; its error as
    one FeatureError line naming column `where`."""
    try:
        return build()
    except FeatureError as error:
        problem = str(error)
    except KeyError as error:
        problem = f"a Hugging Face {what} without {error}"
    except (TypeError, ValueError) as error:
        problem = f"a malformed Hugging Face {what} ({type(error).__name__}: {error})"
    place = f"column {where!r}: " if where else ""
    raise FeatureError(clip(printable(place + problem), _MESSAGE_LIMIT))
