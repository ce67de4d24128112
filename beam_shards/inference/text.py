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

from collections.abc import Collection, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.features import load_bounded
from beam_shards.inference.kinds import First, Kinds, merge, note_int_range
from beam_shards.inference.strings import (arrow_indices, arrow_mask, byte_at, byte_set, holds_any, lengths, only_bytes,
                                           string_kinds, subset, true_count)
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
# Columns of fewer cells are classified together, up to this many cells in all.
_GROUP_CELLS = 4096


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
    return summarize_text_columns({path: array}, labels=[path] if labels else [], paths=[path] if paths else [],
                                  origin=origin)[path]


def summarize_text_columns(columns: dict[str, pa.Array | pa.ChunkedArray], *, labels: Collection[str] = (),
                           paths: Collection[str] = (), origin: First = ()) -> dict[str, Kinds]:
    """The summary of each column of CSV cells (`summarize_text`), by name. The cells of the
    columns that are not all numbers are classified together, in a few Arrow calls for all
    rather than a few for each: a table may have thousands of columns.

    Args:
      labels: the columns whose distinct cells to keep.
      paths: the columns whose cells that end in an image file extension to count.
    """
    summaries, mixed = {}, []
    for name, array in columns.items():
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        present = array.drop_null() if array.null_count else array
        kinds = summaries[name] = Kinds(rows=len(array), nulls=array.null_count, cells=len(present))
        if name in labels:
            kinds.labels = frozenset(pc.unique(present).to_pylist())
        if len(present) and not _all_numbers(present, kinds):
            mixed.append((name, present))
    for group in _groups(mixed):
        _summarize_cells(group, summaries, paths, origin)
    return summaries


def _all_numbers(cells: pa.Array, kinds: Kinds) -> bool:
    """Counts `cells` into `kinds` when every one is a number, by a whole-column cast; whether it did."""
    return (true_count(_NUMBER_START[byte_at(cells, 0)]) == len(cells) and only_bytes(cells, _NUMBER_BYTES)
            and _numbers(cells, kinds))


def _groups(columns: list[tuple[str, pa.Array]]) -> Iterator[list[tuple[str, pa.Array]]]:
    """`columns` in groups to classify together: a column of many cells alone (its few Arrow
    calls cost little beside its cells, and a copy into a group would not), the others in runs
    of up to `_GROUP_CELLS` cells."""
    group: list[tuple[str, pa.Array]] = []
    held = 0  # the cells of `group`, counted as it grows: summing them for each column was quadratic
    for name, cells in columns:
        if len(cells) >= _GROUP_CELLS:
            yield [(name, cells)]
            continue
        if held + len(cells) > _GROUP_CELLS:
            yield group
            group, held = [], 0
        group.append((name, cells))
        held += len(cells)
    if group:
        yield group


def _summarize_cells(columns: list[tuple[str, pa.Array]], summaries: dict[str, Kinds], paths: Collection[str],
                     origin: First) -> None:
    """Counts the cells of `columns` (none null) into their summaries in `summaries`."""
    present = columns[0][1] if len(columns) == 1 else pa.concat_arrays([cells for _, cells in columns])
    owner = np.repeat(np.arange(len(columns)), [len(cells) for _, cells in columns])
    first = byte_at(present, 0)
    # A digit first and '-' fifth, not after an exponent's 'e', is a date or datetime, or text; never a number.
    maybe_number = _NUMBER_START[first]
    if maybe_number.any():
        maybe_number &= ~(_DIGITS[first] & (byte_at(present, 4) == ord("-")) & ~_EXPONENT[byte_at(present, 3)])
    numbers = _matches(present, maybe_number, FLOAT)
    ints = numbers.copy()
    found = np.flatnonzero(numbers)
    ints[found] = ~holds_any(subset(present, found), _NOT_INT)
    size = lengths(present)
    bools = _matches(present, _BOOL_START[first] & ((size == 4) | (size == 5)), BOOL)
    looks_json = np.flatnonzero(_JSON_START[first])
    parsed = _parse_json(present.take(arrow_indices(looks_json)).to_pylist())
    json = np.zeros(len(present), np.bool_)
    json[looks_json[[place for place, value in enumerate(parsed) if value is not _NOT_JSON]]] = True
    text = ~(numbers | bools | json)
    strings = string_kinds(present if text.all() else present.filter(arrow_mask(text)),
                           paths=any(name in paths for name, _ in columns))
    if "image_paths" in strings:
        strings["image_paths"] &= np.asarray([name in paths for name, _ in columns])[owner[text]]
    counts = {"ints": ints, "floats": numbers & ~ints, "bools": bools}
    targets = [summaries[name] for name, _ in columns]
    text_owner = owner[text]
    for kind, mask, owners in [*((kind, mask, owner) for kind, mask in counts.items()),
                               *((kind, mask, text_owner) for kind, mask in strings.items())]:
        if not mask.any():
            continue
        for kinds, count in zip(targets, np.bincount(owners[mask], minlength=len(columns)).tolist()):
            setattr(kinds, kind, getattr(kinds, kind) + count)
    _note_int_ranges(present, ints, owner, targets)
    values = [value for value in parsed if value is not _NOT_JSON]
    json_owners = owner[json].tolist()
    for column in sorted(set(json_owners)):
        name = columns[column][0]
        found = [value for value, held in zip(values, json_owners) if held == column]
        summaries[name].rows -= len(found)
        summaries[name] = merge(summaries[name], summarize_values(found, origin=origin, path=name))


def _matches(cells: pa.Array, candidates: np.ndarray, pattern: str) -> np.ndarray:
    """Whether each cell is among `candidates` and matches `pattern`."""
    found = np.zeros(len(cells), np.bool_)
    places = np.flatnonzero(candidates)
    if len(places):
        hits = pc.match_substring_regex(subset(cells, places), pattern)
        found[places[hits.to_numpy(zero_copy_only=False)]] = True
    return found


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
    ints = np.isfinite(numbers) & (numbers == np.floor(numbers))
    whole = np.flatnonzero(ints)
    ints[whole] = ~holds_any(subset(cells, whole), _NOT_INT)
    kinds.ints = true_count(ints)
    kinds.floats = len(cells) - kinds.ints
    _note_int_ranges(cells, ints, np.zeros(len(cells), np.intp), [kinds])
    return True


def _cast(cells: pa.Array, arrow_type: pa.DataType) -> pa.Array | None:
    """`cells` cast to `arrow_type`, or None when one cannot be (tried on the first few first)."""
    try:
        pc.cast(cells.slice(0, _SAMPLE), arrow_type)
        return pc.cast(cells, arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _note_int_ranges(cells: pa.Array, ints: np.ndarray, owner: np.ndarray, targets: list[Kinds]) -> None:
    """Notes in `targets[owner[i]]` the range of each int cell `i` (where `ints`) that may not fit
    int64: a negative one, and one longer than `_SHORT_INT` characters."""
    if not ints.any():
        return
    negative = _matches(cells, ints, _NEGATIVE)
    for column in np.unique(owner[negative]).tolist():
        note_int_range(targets[column], -1, 0)
    long = np.flatnonzero(ints & (lengths(cells) > _SHORT_INT))
    for place, cell in zip(long.tolist(), cells.take(arrow_indices(long)).to_pylist()):
        note_int_range(targets[owner[place]], int(cell), int(cell))


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
