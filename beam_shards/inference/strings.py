"""What strings hold: dates, datetimes (with or without a time zone), or other text; and
whether they name image files.

A string is a date or datetime when Arrow casts it to the type it would be stored as
(`date32`, `timestamp[us]`, `timestamp[us, tz=UTC]`), so what inference takes for a date a
conversion can store as one: a date is 10 characters (`2024-01-31`); a datetime is longer
(`2024-01-31 10:00`, `2024-01-31T10:00:00.5`), and zoned when it ends in `Z` or an offset
(`+02`, `+0200`, `+02:00`). Strings are classified over whole Arrow arrays with cheap byte
tests first; only strings those let through are cast or matched by a regular expression.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.inference.kinds import Kinds

# The file extensions of images, as paths name them (lower case).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff")
# The column that is an Image when no image column is named, if it holds image paths.
DEFAULT_IMAGE_COLUMN = "image"
IMAGE_PATH = "(?i)[.](?:" + "|".join(extension[1:] for extension in IMAGE_EXTENSIONS) + ")$"
_ZONE = "(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)$"
DATE_TYPE, DATETIME_TYPE, ZONED_TYPE = pa.date32(), pa.timestamp("us"), pa.timestamp("us", tz="UTC")


def true_count(mask: pa.Array | np.ndarray) -> int:
    """How many values of a boolean array are true."""
    if isinstance(mask, np.ndarray):
        return int(np.count_nonzero(mask))
    return int(pc.sum(mask).as_py() or 0)


# numpy arrays become Arrow arrays by their buffers: pa.array() of one would import pandas,
# which takes seconds.
def arrow_mask(mask: np.ndarray) -> pa.Array:
    """A numpy array of bools as an Arrow boolean array."""
    bits = np.packbits(mask, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(bits)])


def arrow_indices(places: np.ndarray) -> pa.Array:
    """A numpy array of positions as an Arrow int64 array, for `take`."""
    return pa.Array.from_buffers(pa.int64(), len(places), [None, pa.py_buffer(places.astype(np.int64))])


def subset(array: pa.Array, places: np.ndarray) -> pa.Array:
    """The values of `array` at `places` (ascending, none repeated): `array` itself when that is all of them."""
    return array if len(places) == len(array) else array.take(arrow_indices(places))


def byte_set(chars: bytes) -> np.ndarray:
    """A table of the 256 byte values: true for those in `chars`."""
    table = np.zeros(256, np.bool_)
    table[list(chars)] = True
    return table


def _offsets_and_data(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The offsets of a string array's values (one more than values) and its bytes, without copying."""
    _, offsets, data = array.buffers()
    kind = np.int64 if pa.types.is_large_string(array.type) else np.int32
    offsets = np.frombuffer(offsets, kind)[array.offset:array.offset + len(array) + 1]
    return offsets, np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)


def byte_at(array: pa.Array, place: int) -> np.ndarray:
    """The byte at `place` of each string of `array` (none null); 0 past its end."""
    offsets, data = _offsets_and_data(array)
    if len(data) == 0:
        return np.zeros(len(array), np.uint8)
    starts = offsets[:-1] + place
    return np.where(starts < offsets[1:], data[np.minimum(starts, len(data) - 1)], 0).astype(np.uint8)


def lengths(array: pa.Array) -> np.ndarray:
    """How many bytes each string of `array` has."""
    return np.diff(_offsets_and_data(array)[0])


def holds_any(array: pa.Array, table: np.ndarray) -> np.ndarray:
    """Whether each string of `array` (none null) holds a byte of `table` (`byte_set`)."""
    offsets, data = _offsets_and_data(array)
    if len(array) == 0 or offsets[-1] == offsets[0]:
        return np.zeros(len(array), np.bool_)
    flags = table[data[offsets[0]:offsets[-1]]]
    starts = np.minimum(offsets[:-1] - offsets[0], len(flags) - 1)
    return np.logical_or.reduceat(flags, starts) & (offsets[1:] > offsets[:-1])


def castable_mask(array: pa.Array, arrow_type: pa.DataType) -> np.ndarray:
    """Whether Arrow casts each string of `array` to `arrow_type`. Halves until each part casts
    or is one string: a few bad strings cost a few casts each."""
    if len(array) == 0:
        return np.zeros(0, np.bool_)
    try:
        pc.cast(array, arrow_type)
        return np.ones(len(array), np.bool_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if len(array) == 1:
            return np.zeros(1, np.bool_)
        half = len(array) // 2
        return np.concatenate([castable_mask(array.slice(0, half), arrow_type),
                               castable_mask(array.slice(half), arrow_type)])


def only_bytes(array: pa.Array, table: np.ndarray) -> bool:
    """Whether every string of `array` holds only bytes of `table` (`byte_set`)."""
    offsets, data = _offsets_and_data(array)
    return bool(table[data[offsets[0]:offsets[-1]]].all())


def classify_strings(array: pa.Array, kinds: Kinds, *, paths: bool = False, among: np.ndarray | None = None) -> None:
    """Counts the strings of `array` (none null; those where `among` is true, when given) into
    `kinds`: dates, datetimes (naive or zoned) and other strings; with `paths`, also how many
    end in an image file extension."""
    if among is not None and true_count(among) < len(array):
        array = array.filter(arrow_mask(among))
    found = string_kinds(array, paths=paths)
    for name, mask in found.items():
        setattr(kinds, name, getattr(kinds, name) + true_count(mask))


def string_kinds(array: pa.Array, *, paths: bool = False) -> dict[str, np.ndarray]:
    """The kind of each string of `array` (none null), as masks named for the `Kinds` counts
    they add to: `dates`, `datetimes`, `zoned` and `strings`, one of which holds each string;
    with `paths`, also `image_paths`, the strings that end in an image file extension."""
    found = {name: np.zeros(len(array), np.bool_) for name in ("dates", "datetimes", "zoned")}
    found["strings"] = np.ones(len(array), np.bool_)
    if paths:
        found["image_paths"] = _regex_mask(array, IMAGE_PATH)
    if len(array) == 0:
        return found
    temporal = np.flatnonzero(byte_at(array, 4) == ord("-"))
    if len(temporal) == 0:
        return found
    candidates = subset(array, temporal)
    is_date = lengths(candidates) == 10
    zoned = np.zeros(len(candidates), np.bool_)
    longer = np.flatnonzero(~is_date)
    zoned[longer] = _regex_mask(subset(candidates, longer), _ZONE)
    for name, part, arrow_type in (("dates", is_date, DATE_TYPE), ("zoned", zoned, ZONED_TYPE),
                                   ("datetimes", ~is_date & ~zoned, DATETIME_TYPE)):
        places = np.flatnonzero(part)
        hits = temporal[places[castable_mask(subset(candidates, places), arrow_type)]]
        found[name][hits] = True
        found["strings"][hits] = False
    return found


def _regex_mask(array: pa.Array, pattern: str) -> np.ndarray:
    if len(array) == 0:
        return np.zeros(0, np.bool_)
    return pc.match_substring_regex(array, pattern).to_numpy(zero_copy_only=False)
