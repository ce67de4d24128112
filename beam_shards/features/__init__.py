"""Features: what each column of a cache holds, its Arrow type, and how values are encoded.

A `Features` object (`schema`) is the schema of a cache: a name for each column and
its feature kind. Each kind lives in its own module, with how it checks, encodes,
decodes and describes values, its Arrow type, its JSON form and its Hugging Face form
(which `beam_shards.hf` maps): `Value` and `ClassLabel` (`value`), `Image`, `Video` and
`Audio` (`files`), `Array` (`array`), `Sequence` (`sequence`), `Struct` (`struct`) and
`Json` (`json_value`); `base` holds what they share, `casting` the casts of numbers that
change no value, `json_text` the bound on how deeply JSON nests.

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
from beam_shards.features.base import (FLOAT_DTYPES, Feature, INT_DTYPES, NUMERIC_DTYPES, VALUE_DTYPES, arrow_family,
                                       casts, feature_from_dict, feature_kinds, list_lengths)
from beam_shards.features.casting import cast_safely
from beam_shards.features.columns import numpy_values, row_getter
from beam_shards.features.decode import check_image_mode, decode_table
from beam_shards.features.files import Audio, Image, Video
from beam_shards.features.image_check import open_image, sniff_format
from beam_shards.features.json_text import MAX_DEPTH, TooDeep, json_depth, json_text_depth, load_bounded
from beam_shards.features.json_value import Json
from beam_shards.features.schema import (COLUMN_TYPES, Features, HF_METADATA_KEY, RESERVED_PREFIX, SCHEMA_METADATA_KEY,
                                         encode_example)
from beam_shards.features.sequence import Sequence
from beam_shards.features.struct import Struct
from beam_shards.features.value import ClassLabel, Value, temporal_type

__all__ = [
    "Array", "arrow_family", "Audio", "cast_safely", "casts", "check_image_mode", "ClassLabel", "COLUMN_TYPES",
    "decode_table", "encode_example", "Feature", "feature_from_dict", "feature_kinds", "Features", "FLOAT_DTYPES",
    "HF_METADATA_KEY", "Image", "INT_DTYPES", "Json", "json_depth", "json_text_depth", "list_lengths", "load_bounded",
    "MAX_DEPTH", "NUMERIC_DTYPES", "numpy_values", "open_image", "RESERVED_PREFIX", "row_getter", "SCHEMA_METADATA_KEY",
    "Sequence", "sniff_format", "Struct", "temporal_type", "TooDeep", "Value", "VALUE_DTYPES", "Video",
]
