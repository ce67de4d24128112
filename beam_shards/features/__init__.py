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

from beam_shards.lazy import lazy_names

_LAZY = {
    "Array": "beam_shards.features.array",
    "FLOAT_DTYPES": "beam_shards.features.base",
    "Feature": "beam_shards.features.base",
    "INT_DTYPES": "beam_shards.features.base",
    "NUMERIC_DTYPES": "beam_shards.features.base",
    "VALUE_DTYPES": "beam_shards.features.base",
    "arrow_family": "beam_shards.features.base",
    "casts": "beam_shards.features.base",
    "feature_from_dict": "beam_shards.features.kinds",
    "feature_kinds": "beam_shards.features.kinds",
    "list_lengths": "beam_shards.features.base",
    "cast_safely": "beam_shards.features.casting",
    "numpy_values": "beam_shards.features.columns",
    "row_getter": "beam_shards.features.columns",
    "check_image_mode": "beam_shards.features.decode",
    "decode_table": "beam_shards.features.decode",
    "Audio": "beam_shards.features.files",
    "Image": "beam_shards.features.files",
    "Video": "beam_shards.features.files",
    "open_image": "beam_shards.features.image_check",
    "sniff_format": "beam_shards.features.image_check",
    "MAX_DEPTH": "beam_shards.features.json_text",
    "TooDeep": "beam_shards.features.json_text",
    "json_depth": "beam_shards.features.json_text",
    "json_text_depth": "beam_shards.features.json_text",
    "load_bounded": "beam_shards.features.json_text",
    "Json": "beam_shards.features.json_value",
    "COLUMN_TYPES": "beam_shards.features.schema",
    "Features": "beam_shards.features.schema",
    "HF_METADATA_KEY": "beam_shards.features.schema",
    "RESERVED_PREFIX": "beam_shards.features.schema",
    "SCHEMA_METADATA_KEY": "beam_shards.features.schema",
    "encode_example": "beam_shards.features.schema",
    "Sequence": "beam_shards.features.sequence",
    "Struct": "beam_shards.features.struct",
    "ClassLabel": "beam_shards.features.value",
    "Value": "beam_shards.features.value",
    "temporal_type": "beam_shards.features.value",
}

__getattr__ = lazy_names(__name__, _LAZY)

__all__ = [
    "Array", "arrow_family", "Audio", "cast_safely", "casts", "check_image_mode", "ClassLabel", "COLUMN_TYPES",
    "decode_table", "encode_example", "Feature", "feature_from_dict", "feature_kinds", "Features", "FLOAT_DTYPES",
    "HF_METADATA_KEY", "Image", "INT_DTYPES", "Json", "json_depth", "json_text_depth", "list_lengths", "load_bounded",
    "MAX_DEPTH", "NUMERIC_DTYPES", "numpy_values", "open_image", "RESERVED_PREFIX", "row_getter", "SCHEMA_METADATA_KEY",
    "Sequence", "sniff_format", "Struct", "temporal_type", "TooDeep", "Value", "VALUE_DTYPES", "Video",
]
