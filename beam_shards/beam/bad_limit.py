"""The limit on what a write skips: `WriteToArrowShards(..., on_bad="skip", max_bad=...)`.

The examples skipped (the sink's dead letters, and any the caller set aside before it)
are combined into a count and the first few reasons (`count_skipped.CountSkippedFn`, or
`skipped_of` in one process), which the finalize step takes as a side input: when they are more than `max_bad` allows it raises `TooManyBadError`
before publishing, so nothing is published, on any runner (no Beam counter is read).
The examples seen are those written plus those skipped, so no step counts the input.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from beam_shards.errors import TooManyBadError

# How many reasons the error quotes, the first in key order.
FIRST_REASONS = 3
# What a write does with an example that does not fit: raise, or skip it (a dead letter).
ON_BAD = ("fail", "skip")


class Skipped(NamedTuple):
    """How many examples a write skipped, and the first `FIRST_REASONS` of them as `(key, reason)`."""

    count: int
    first: list[tuple[Any, str]]


def check_skipping(on_bad: str, max_bad: int | float | None, set_aside: bool) -> None:
    """Raises ValueError for what a write is told to do with bad examples that does not hold
    together: an `on_bad` not in `ON_BAD`; a `max_bad` that is neither None, a count (an int
    >= 0) nor a fraction (a float from 0 to 1), or given without `on_bad="skip"`; examples
    `set_aside` without a `max_bad` to count them toward."""
    if on_bad not in ON_BAD:
        raise ValueError(f"on_bad must be one of {ON_BAD}; got {on_bad!r}")
    if max_bad is not None:
        if isinstance(max_bad, bool) or not isinstance(max_bad, (int, float)):
            raise ValueError(f"max_bad must be a count (an int) or a fraction of the examples (a float); got "
                             f"{max_bad!r}")
        if isinstance(max_bad, int) and max_bad < 0 or isinstance(max_bad, float) and not 0 <= max_bad <= 1:
            raise ValueError(f"max_bad must be a count >= 0 or a fraction from 0.0 to 1.0; got {max_bad!r}")
        if on_bad != "skip":
            raise ValueError(f"max_bad limits what on_bad=\"skip\" skips; got on_bad={on_bad!r}")
    if set_aside and max_bad is None:
        raise ValueError("set_aside is counted toward max_bad; give max_bad too")


def describe_limit(max_bad: int | float) -> str:
    """`5` for a count, `1%` for a fraction."""
    return f"{max_bad * 100:g}%" if isinstance(max_bad, float) else f"{max_bad:,}"


def _in_key_order(items: list[tuple[Any, str]]) -> list[tuple[Any, str]]:
    try:
        return sorted(items, key=lambda item: item[0])
    except TypeError:  # keys of types that do not compare
        return sorted(items, key=lambda item: repr(item[0]))


def skipped_of(letters: list[dict[str, Any]]) -> Skipped:
    """The `Skipped` of dead letters (`{"key", "reason", ...}` dicts) all at hand."""
    return Skipped(len(letters), first_reasons([(letter["key"], letter["reason"]) for letter in letters]))


def first_reasons(items: list[tuple[Any, str]]) -> list[tuple[Any, str]]:
    """The first `FIRST_REASONS` of `(key, reason)` pairs, in key order."""
    return _in_key_order(items)[:FIRST_REASONS]


def check_skipped(skipped: Skipped, written: int, max_bad: int | float, path: str) -> dict[str, Any]:
    """The record of what a write to `path` skipped, for its version's metadata.

    Raises:
      TooManyBadError: more skipped than `max_bad` allows of the `written + skipped.count`
        examples seen; names the count, the limit and the first reasons.
    """
    seen = written + skipped.count
    allowed = max_bad if isinstance(max_bad, int) else max_bad * seen
    if skipped.count > allowed:
        reasons = "; ".join(reason if str(key) in reason else f"{key}: {reason}"
                            for key, reason in skipped.first)
        raise TooManyBadError(
            f"{skipped.count:,} bad input(s) of {seen:,} read ({skipped.count / seen:.1%}), more than "
            f"max_bad={describe_limit(max_bad)} allows; nothing was published to {path}. The first: {reasons}")
    return {"skipped": skipped.count, "read": seen, "max_bad": describe_limit(max_bad)}
