"""Inference: the features of tabular inputs, from summaries of every row's values.

A reader summarizes each record batch it reads (`summarize_table`: Arrow columns from
pyarrow's JSON reader with `summarize_arrow`, CSV cells with `summarize_text`, Python values
with `summarize_values`) into a `Kinds`: counts of each kind of value, per column and per
key and list item below it. Summaries `merge` in any order, as a Beam combine merges them;
`features_of` widens the merged summary to features as pandas and Hugging Face datasets
would (`widening`). `NullTokens` says which CSV cells are null. Pure: no Beam, no file I/O.

Example:
    >>> import pyarrow as pa
    >>> from beam_shards.inference import features_of, merge, summarize_table
    >>> first = summarize_table(pa.table({"mpg": ["18", "15"], "code": ["ABC", "0E0"]}), cells=True)
    >>> later = summarize_table(pa.table({"mpg": ["16.5"], "code": ["XYZ"]}), cells=True)
    >>> features, widened = features_of(merge(later, first))
    >>> features["mpg"], features["code"]
    (Value('float64', nullable=True), Value('string', nullable=True))
    >>> widened
    ['mpg: ints and floats -> float64', 'code: floats and text -> string']
"""

from beam_shards.lazy import lazy_names

_LAZY = {
    "summarize_arrow": "beam_shards.inference.arrow",
    "Kinds": "beam_shards.inference.kinds",
    "merge": "beam_shards.inference.kinds",
    "merge_all": "beam_shards.inference.kinds",
    "class_label_of": "beam_shards.inference.labels",
    "NA_VALUES": "beam_shards.inference.nulls",
    "NullTokens": "beam_shards.inference.nulls",
    "DEFAULT_IMAGE_COLUMN": "beam_shards.inference.strings",
    "IMAGE_EXTENSIONS": "beam_shards.inference.strings",
    "summarize_table": "beam_shards.inference.table",
    "summarize_text": "beam_shards.inference.text",
    "summarize_values": "beam_shards.inference.values",
    "features_of": "beam_shards.inference.widening",
}

__getattr__ = lazy_names(__name__, _LAZY)

__all__ = [
    "class_label_of", "DEFAULT_IMAGE_COLUMN", "features_of", "IMAGE_EXTENSIONS", "Kinds", "merge", "merge_all",
    "NA_VALUES", "NullTokens", "summarize_arrow", "summarize_table", "summarize_text", "summarize_values",
]
