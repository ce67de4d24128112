"""Features: what each column of a cache holds, its Arrow type, and how values are encoded.

A `Features` object (`schema`) is the schema of a cache: a name for each column and
its feature kind. Each kind lives in its own module, with how it checks, encodes,
decodes and describes values, its Arrow type, its JSON form and its Hugging Face form
(which `beam_shards.hf` maps): `Value` and `ClassLabel` (`value`), `Image`, `Video` and
`Audio` (`files`), `Array` (`array`), `Sequence` (`sequence`) and `Struct` (`struct`);
`base` holds what they share.

Example:
    >>> from beam_shards import Features, Value, Image, Array, ClassLabel, encode_example
    >>> features = Features({
    ...     "image": Image(),
    ...     "label": ClassLabel(names=["cat", "dog"]),
    ...     "embedding": Array((4,), "float32"),
    ...     "caption": Value("string"),
    ... })
    >>> row = encode_example(
    ...     {"image": None, "label": "dog", "embedding": [0, 1, 2, 3], "caption": "a dog"},
    ...     features)
    >>> row["label"], row["embedding"].dtype
    (1, dtype('float32'))
"""

from beam_shards.features.array import Array
from beam_shards.features.base import VALUE_DTYPES, Feature, cast_safely, feature_from_dict, feature_kinds
from beam_shards.features.files import Audio, Image, Video
from beam_shards.features.schema import COLUMN_TYPES, HF_METADATA_KEY, SCHEMA_METADATA_KEY, Features, encode_example
from beam_shards.features.sequence import Sequence
from beam_shards.features.struct import Struct
from beam_shards.features.value import ClassLabel, Value

__all__ = [
    "Array", "Audio", "COLUMN_TYPES", "ClassLabel", "Feature", "Features", "HF_METADATA_KEY", "Image",
    "SCHEMA_METADATA_KEY", "Sequence", "Struct", "VALUE_DTYPES", "Value", "Video", "cast_safely", "encode_example",
    "feature_from_dict", "feature_kinds",
]
