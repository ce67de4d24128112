"""One grammar for sizes, durations and counts, shared by the API, `beam-shards` and the pipelines.

Sizes take SI and binary units alike: `64MB` is 64x10^6 bytes, `64MiB` is 64x2^20, `1TB`
is 10^12, a bare number is bytes. Durations take `s`, `m`, `h`, `d` and `w` (`30s`, `7d`;
a bare number is seconds). Counts are whole numbers. Each parser refuses a value out of
its range with a ValueError that names the value and the range, so no absurd number
reaches the code that would overflow on it.

Example:
    >>> parse_size("64MB"), parse_size("64MiB"), parse_duration("7d").days, parse_count("8")
    (64000000, 67108864, 7, 8)
"""

from __future__ import annotations

import argparse
import datetime
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

# Far past any shard or batch, and far below what Arrow and Python's C code overflow on.
MAX_SIZE = 1 << 50  # 1 PiB
_MAX_DURATION = datetime.timedelta(days=365 * 1000)
MAX_COUNT = (1 << 31) - 1

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")
_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

T = TypeVar("T")


def parse_size(value: int | str) -> int:
    """Bytes in a size: an int, or text like `64MB` (10^6), `1GiB` (2^30), `512KiB`, `1TB`, `1000`.

    Raises:
      ValueError: not a size, or outside 1 byte .. 1 PiB.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{value!r} is not a size; give bytes as an int or text like 64MB, 1.5GB or 512MiB")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _SIZE_UNITS:
            raise ValueError(f"{value!r} is not a size; write it like 64MB, 1.5GB or 512MiB "
                             f"(units: B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB)")
        number = float(match.group(1)) * _SIZE_UNITS[unit]
        if not math.isfinite(number):  # hundreds of digits: float gives inf, which round() cannot take
            raise ValueError(f"size {value!r} is out of range: it must be from 1 byte to 1PiB")
        size = round(number)
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"size {value!r} is out of range: it must be from 1 byte to 1PiB")
    return size


def parse_duration(value: datetime.timedelta | int | float | str) -> datetime.timedelta:
    """A duration: a timedelta, seconds as a number, or text like `45s`, `30m`, `12h`, `7d`, `2w`, `0`.

    Raises:
      ValueError: not a duration, or outside 0 .. 1,000 years.
    """
    if isinstance(value, datetime.timedelta):
        duration = value
    elif isinstance(value, str):
        match = _DURATION.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _DURATION_UNITS:
            raise ValueError(f"{value!r} is not a duration; write it like 7d, 12h, 30m, 45s or 0")
        duration = _seconds(float(match.group(1)) * _DURATION_UNITS[unit], value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        duration = _seconds(value, value)
    else:
        raise ValueError(f"{value!r} is not a duration; give a timedelta, seconds, or text like 7d")
    if not datetime.timedelta(0) <= duration <= _MAX_DURATION:
        raise ValueError(f"duration {value!r} is out of range: it must be from 0 to 1000 years")
    return duration


def _seconds(seconds: float, value: Any) -> datetime.timedelta:
    if not 0 <= seconds <= _MAX_DURATION.total_seconds():  # also NaN: timedelta would overflow first
        raise ValueError(f"duration {value!r} is out of range: it must be from 0 to 1000 years")
    return datetime.timedelta(seconds=seconds)


def parse_count(value: int | str, *, minimum: int = 1) -> int:
    """A whole number of at least `minimum` (1 by default), at most 2^31 - 1: rows, versions, pixels.

    Raises:
      ValueError: not a whole number, or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{value!r} is not a whole number")
    try:
        count = int(value) if isinstance(value, int) else int(value.strip(), 10)
    except ValueError:
        raise ValueError(f"{value!r} is not a whole number") from None
    if not minimum <= count <= MAX_COUNT:
        raise ValueError(f"{value!r} is out of range: it must be a whole number from {minimum} to {MAX_COUNT:,}")
    return count


def flag(parse: Callable[[str], T]) -> Callable[[str], T]:
    """`parse` as an argparse `type=`: its ValueError becomes argparse's usage error (exit status 2)."""

    def parse_flag(text: str) -> T:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse_flag.__name__ = parse.__name__.removeprefix("parse_")  # argparse names the type in its messages
    return parse_flag


size_flag = flag(parse_size)
duration_flag = flag(parse_duration)
count_flag = flag(parse_count)
