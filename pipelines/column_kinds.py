"""What kinds of values each column holds, summed up batch by batch and merged, widening as pandas and HF do.

A kind is a small tuple: `("null",)` (nothing seen but nulls), a scalar (`("bool",)`,
`("int",)`, `("float",)`, `("string",)`, `("date",)`, `("timestamp",)`), `("list", item)`,
`("struct", ((key, kind), ...))` or `("json",)` (values of shapes no one type holds). Two
kinds merge into the narrowest that holds both: ints and floats -> float; dates and
datetimes -> timestamp; other scalars that differ -> string; lists item by item,
objects key by key; a list or object met with anything else -> json.

CSV cells are text: a column is a number, bool, date or datetime only if every non-null
cell of it parses as one (`0E0` among codes stays text). JSON strings become dates or
datetimes the same way; JSON numbers, bools, lists and objects keep their kinds.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines import nesting

Kind = tuple
NULL: Kind = ("null",)
JSON: Kind = ("json",)
STRING: Kind = ("string",)
_SCALARS = {"bool", "int", "float", "string", "date", "timestamp"}
_BOOL = r"^(?:[Tt]rue|TRUE|[Ff]alse|FALSE)$"
_INT = r"^[+-]?\d+$"
_FLOAT = r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$"
_DATE = r"^\d{4}-\d{2}-\d{2}$"
_DATETIME = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?$"
# Text that pandas' and HF's readers take as a number, bool, date or datetime (in this order of preference).
_TEXT_KINDS = (("bool", _BOOL), ("int", _INT), ("float", _FLOAT), ("date", _DATE), ("timestamp", _DATETIME))
_ARROW_TYPES = {"date": pa.date32(), "timestamp": pa.timestamp("us")}
_PY_DATE, _PY_DATETIME = re.compile(_DATE), re.compile(_DATETIME)


def merge(a: Kind, b: Kind) -> Kind:
    """The narrowest kind that holds values of kinds `a` and `b`."""
    if a == b or b == NULL:
        return a
    if a == NULL:
        return b
    if a[0] == b[0] == "list":
        return ("list", merge(a[1], b[1]))
    if a[0] == b[0] == "struct":
        fields = dict(a[1])
        for key, kind in b[1]:
            fields[key] = merge(fields[key], kind) if key in fields else kind
        return ("struct", tuple(fields.items()))
    if a[0] not in _SCALARS or b[0] not in _SCALARS:
        return JSON
    pair = {a[0], b[0]}
    if pair == {"int", "float"}:
        return ("float",)
    if pair == {"date", "timestamp"}:
        return ("timestamp",)
    return STRING


def describe(kind: Kind) -> str:
    """A kind as a person reads it: `int`, `list of float`, `object`."""
    if kind[0] == "list":
        return f"list of {describe(kind[1])}"
    return {"struct": "object", "json": "mixed JSON"}.get(kind[0], kind[0])


def _all_match(values: pa.Array, pattern: str) -> bool:
    return bool(pc.all(pc.match_substring_regex(values, pattern)).as_py())


def _casts(values: pa.Array, kind: str) -> bool:
    try:
        pc.cast(values, _ARROW_TYPES[kind])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False  # 2021-02-30 looks like a date and is not one
    return True


def string_kind(values: pa.Array) -> Kind:
    """The kind of JSON strings: dates or datetimes when every one parses as such, else string."""
    values = values.drop_null()
    if not len(values):
        return NULL
    for kind, pattern in _TEXT_KINDS[3:]:
        if _all_match(values, pattern) and _casts(values, kind):
            return (kind,)
    return STRING


def text_kind(cells: pa.Array) -> Kind:
    """The kind of a CSV column's cells (strings, null tokens already null)."""
    values = cells.drop_null()
    if not len(values):
        return NULL
    for kind, pattern in _TEXT_KINDS:
        if _all_match(values, pattern) and (kind not in _ARROW_TYPES or _casts(values, kind)):
            return (kind,)
    if _all_match(values, r"^\s*[\[{]"):
        kinds = []
        for cell in values.to_pylist():
            try:
                kinds.append(python_kind(nesting.loads(cell)))
            except nesting.TooDeep:
                continue  # a bad cell, not text: the conversion names it
            except ValueError:
                return STRING
        return _merge_all(kinds)
    return STRING


def arrow_kind(array: pa.Array) -> Kind:
    """The kind of a column pyarrow's JSON reader read (its types, and strings looked into)."""
    kind = array.type
    if pa.types.is_null(kind):
        return NULL
    if pa.types.is_boolean(kind):
        return ("bool",)
    if pa.types.is_integer(kind):
        return ("int",)
    if pa.types.is_floating(kind):
        return ("float",)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return string_kind(array)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return ("list", arrow_kind(array.flatten()))
    if pa.types.is_struct(kind):
        valid = array.filter(array.is_valid())
        return ("struct", tuple((kind.field(i).name, arrow_kind(valid.field(i))) for i in range(kind.num_fields)))
    return JSON


def python_kind(value: Any) -> Kind:
    """The kind of a JSON value in Python form."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return ("bool",)
    if isinstance(value, int):
        return ("int",)
    if isinstance(value, float):
        return ("float",)
    if isinstance(value, str):
        if _PY_DATE.match(value) or _PY_DATETIME.match(value):
            return string_kind(pa.array([value]))
        return STRING
    if isinstance(value, list):
        return ("list", _merge_all(python_kind(item) for item in value))
    if isinstance(value, dict):
        return ("struct", tuple((key, python_kind(item)) for key, item in value.items()))
    return JSON


def _merge_all(kinds) -> Kind:
    result = NULL
    for kind in kinds:
        result = merge(result, kind)
    return result
