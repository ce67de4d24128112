"""Bad inputs: what cannot become an example, how a reader says so, and the list of those skipped.

A reader yields a `Malformed` in place of an example it cannot parse, so the write
(`pipelines.write`) decides in one place whether a bad input fails the run, as a
`BadInputError`, or with `--skip_bad` is left out and listed beside the published
cache (`OUTPUT/_bad_inputs.jsonl`, in input order).
"""

from __future__ import annotations

from typing import Any

from beam_shards import BeamShardsError, Manifest
from beam_shards.versions import write_bad_inputs
from pipelines.where import Where

# The tag of the output where the check step sets bad inputs aside.
BAD = "bad"


class BadInputError(BeamShardsError, ValueError):
    """An input that cannot become an example: unreadable, malformed or incomplete."""


class Malformed:
    """Stands for an example in the `(where, example)` stream when its input could not be parsed.

    Readers yield it instead of raising, so `write_cache` decides in one place whether
    a bad input fails the pipeline or is skipped.

    Example:
        >>> (Where.at("data.csv", 7, "line"), Malformed("has 2 fields, the header has 3"))
        ('data.csv, line 7', Malformed('has 2 fields, the header has 3'))

    Args:
      reason: what is wrong with the input, for a person.
    """

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"Malformed({self.reason!r})"


def bad_input(where: Where, error: Exception | str) -> tuple[Where, dict[str, Any]]:
    """A line of the bad-inputs list, after its key (the list is in input order)."""
    return where, {"input": str(where), "error": str(error)}


def as_dead_letter(record: tuple[Where, dict[str, Any]]) -> dict[str, Any]:
    """A line of the list (`bad_input`) as the sink's dead letters are, so the sink counts it toward `max_bad`."""
    where, line = record
    return {"key": where, "reason": line["error"]}


def from_dead_letter(letter: dict[str, Any]) -> tuple[Where, dict[str, Any]]:
    """The line of the list of an example the sink refused (one of its dead letters)."""
    return bad_input(letter["key"], letter["reason"])


def record_bad_inputs(records: list[tuple[Where, dict[str, Any]]], path: str, manifest: Manifest) -> None:
    """Writes the list beside the cache at `path` that `manifest` published, in input order."""
    write_bad_inputs(path, manifest.write_id, [record for _, record in sorted(records, key=lambda item: item[0])])
