"""Summaries of CSV cells: text that holds a bool, a number, a date or datetime, a JSON list
or object, or other text.

A cell is what pandas reads it as: `true`/`false` in any case is a bool (`BOOL`); a number
(`FLOAT`) may have spaces and a sign around it, is an int when it is digits alone, and may be
`inf` or `infinity` in any case (`nan` is a null token, or text); dates and datetimes are as
`strings` says. The
reader has made the null tokens null. A column is summarized whole: a column of numbers by
one Arrow cast (whose grammar is narrower than these patterns), other columns by their cells'
first bytes, then patterns over the few cells those let through. Only cells that look like
JSON (`[...]`, `{...}`) are parsed one by one.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.features import load_bounded
from beam_shards.inference.kinds import First, Kinds, merge, note_int_range
from beam_shards.inference.strings import (arrow_indices, arrow_mask, byte_at, byte_set, classify_strings, holds_any,
                                           lengths, only_bytes, split, true_count)
from beam_shards.inference.values import summarize_values

_SPACE = "[ \t]*"
FLOAT = f"^{_SPACE}[+-]?(?:(?:[0-9]+[.]?[0-9]*|[.][0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:inf|infinity)){_SPACE}$"
BOOL = "^(?i:true|false)$"
_NEGATIVE = f"^{_SPACE}-0*[1-9]"
# The first bytes of numbers, bools and JSON, and the bytes only floats hold among numbers.
_NUMBER_START = byte_set(b" \t+-.0123456789iI")
_BOOL_START = byte_set(b"tTfF")
_JSON_START = byte_set(b"[{")
_DIGITS = byte_set(b"0123456789")
_EXPONENT = byte_set(b"eE")
_NOT_INT = byte_set(b".eEiI")
# The bytes of numbers; Arrow's casts read more (hex ints like `0x1F`), which are text here.
_NUMBER_BYTES = byte_set(b" \t+-.0123456789eEinftyINFTY")
# A column is cast to numbers whole only when its first cells cast: a cast that fails costs
# about a microsecond for each cell it cannot read.
_SAMPLE = 16
# What `_parse_json` gives for a cell that is text.
_NOT_JSON = object()
# An int cell of up to this many characters fits int64 whatever its digits.
_SHORT_INT = 18


def summarize_text(array: pa.Array | pa.ChunkedArray, *, labels: bool = False, paths: bool = False,
                   origin: First = (), path: str = "value") -> Kinds:
    """The summary of a column of CSV cells (strings, null where the cell is a null token).

    Example:
        >>> kinds = summarize_text(pa.array(["1", " 2 ", "0E0", "ABC", None]))
        >>> kinds.ints, kinds.floats, kinds.strings, kinds.nulls, kinds.cells
        (2, 1, 1, 1, 4)

    Args:
      labels: keep the distinct cells (of a label column).
      paths: count the cells that end in an image file extension.
      origin: where the cells are in the input (see `kinds.First`).
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    present = array.drop_null() if array.null_count else array
    kinds = Kinds(rows=len(array), nulls=array.null_count, cells=len(present))
    if labels:
        kinds.labels = frozenset(pc.unique(present).to_pylist())
    if len(present) == 0:
        return kinds
    first = byte_at(present, 0)
    maybe_number = _NUMBER_START[first]
    if true_count(maybe_number) == len(present) and only_bytes(present, _NUMBER_BYTES) and _numbers(present, kinds):
        return kinds
    # A digit first and '-' fifth, not after an exponent's 'e', is a date or datetime, or text; never a number.
    maybe_number &= ~(_DIGITS[first] & (byte_at(present, 4) == ord("-")) & ~_EXPONENT[byte_at(present, 3)])
    text = np.ones(len(present), np.bool_)  # cells are text unless they are more
    numbers = _matches(present, maybe_number, FLOAT, text)
    floats, ints = split(numbers, holds_any(numbers, _NOT_INT))
    if len(ints):
        _note_ints(ints, kinds)
    size = lengths(present)
    bools = _matches(present, _BOOL_START[first] & ((size == 4) | (size == 5)), BOOL, text)
    kinds.ints, kinds.floats, kinds.bools = len(ints), len(floats), len(bools)
    looks_json = np.flatnonzero(_JSON_START[first])
    parsed = _parse_json(present.take(arrow_indices(looks_json)).to_pylist())
    text[looks_json[[place for place, value in enumerate(parsed) if value is not _NOT_JSON]]] = False
    parsed = [value for value in parsed if value is not _NOT_JSON]
    classify_strings(present, kinds, paths=paths, among=text)
    if parsed:
        kinds.rows -= len(parsed)
        kinds = merge(kinds, summarize_values(parsed, origin=origin, path=path))
    return kinds


def _matches(cells: pa.Array, candidates: np.ndarray, pattern: str, text: np.ndarray) -> pa.Array:
    """The cells among `candidates` that match `pattern`, marked False in `text`."""
    places = np.flatnonzero(candidates)
    if len(places) == 0:
        return cells.slice(0, 0)
    found = cells.take(arrow_indices(places))
    hits = pc.match_substring_regex(found, pattern)
    text[places[hits.to_numpy(zero_copy_only=False)]] = False
    return found.filter(hits)


def _numbers(cells: pa.Array, kinds: Kinds) -> bool:
    """Counts `cells` into `kinds` when Arrow casts every one to a number (and none is NaN,
    which is text here, as pandas reads it); whether it did."""
    values = _cast(cells, pa.int64())
    if values is not None:
        kinds.ints = len(cells)
        low, high = pc.min_max(values).values()
        note_int_range(kinds, low.as_py(), high.as_py())
        return True
    values = _cast(cells, pa.float64())
    if values is None or true_count(pc.is_nan(values)):
        return False
    # Ints are among the cells whose value is whole; of those, the ones with no '.', exponent or 'inf'.
    numbers = values.to_numpy()
    whole = np.flatnonzero(np.isfinite(numbers) & (numbers == np.floor(numbers)))
    ints = cells.take(arrow_indices(whole[~holds_any(cells.take(arrow_indices(whole)), _NOT_INT)]))
    kinds.ints, kinds.floats = len(ints), len(cells) - len(ints)
    if len(ints):
        _note_ints(ints, kinds)
    return True


def _cast(cells: pa.Array, arrow_type: pa.DataType) -> pa.Array | None:
    """`cells` cast to `arrow_type`, or None when one cannot be (tried on the first few first)."""
    try:
        pc.cast(cells.slice(0, _SAMPLE), arrow_type)
        return pc.cast(cells, arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _note_ints(ints: pa.Array, kinds: Kinds) -> None:
    if true_count(pc.match_substring_regex(ints, _NEGATIVE)):
        note_int_range(kinds, -1, 0)
    long = ints.filter(arrow_mask(lengths(ints) > _SHORT_INT))
    if len(long):
        values = [int(cell) for cell in long.to_pylist()]
        note_int_range(kinds, min(values), max(values))


def _parse_json(cells: list[str]) -> list:
    """The value of each cell, `_NOT_JSON` for a cell that is not JSON a Json feature holds
    (nested at most `MAX_DEPTH` levels, no NaN): text."""
    parsed = []
    for cell in cells:
        try:
            parsed.append(load_bounded(cell))
        except ValueError:  # not JSON, NaN, or nested too deep (TooDeep)
            parsed.append(_NOT_JSON)
    return parsed
