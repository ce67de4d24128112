"""What the write of every pipeline takes before the sink: `Rows` (several examples in Arrow
form), and `checked`, which turns `(where, example)` pairs into what the sink takes. No Beam
here: the Beam step (`write`) and the conversion in one process (`tabular_local`) share it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pyarrow as pa

from beam_shards import Features
from beam_shards.shards import EncodedRows
from pipelines.bad_inputs import BadInputError, Malformed, bad_input
from pipelines.where import Where


class Rows:
    """Stands for several examples at once in the `(where, example)` stream: rows in Arrow form.

    `write_cache` checks the columns against the features all at once
    (`Features.encode_batch`) and hands them to the sink whole, encoded, so the sink
    does not check them again. When they do not fit, the rows from `one_by_one()` go
    to the sink one at a time instead, so a bad row is named, and with `--skip_bad`
    skipped alone.

    Example:
        >>> import pyarrow as pa
        >>> Rows(pa.table({"n": [1, 2]}), lambda: iter([(Where("f", 0), {"n": 1}), (Where("f", 1), {"n": 2})]))
        Rows(2 rows)

    Args:
      table: a pyarrow Table or RecordBatch with a column per feature.
      one_by_one: returns an iterator of the same rows as `(where, example)` pairs; it
        must pickle (a module-level function or a `functools.partial` of one), since
        Beam may ship a `Rows` between workers.
    """

    def __init__(self, table: pa.Table | pa.RecordBatch, one_by_one: Callable[[], Iterator[tuple[Where, Any]]]):
        self.table = table
        self.one_by_one = one_by_one

    def __repr__(self) -> str:
        return f"Rows({self.table.num_rows} rows)"


def rows_in(example: Any) -> int:
    """How many examples `example` stands for (`Rows` for several), as progress counts them."""
    return example.table.num_rows if isinstance(example, Rows) else 1


class SetAside(NamedTuple):
    """An input `checked` left out (`--skip_bad`): its line of the bad-inputs list (`bad_inputs.bad_input`)."""

    record: tuple[Where, dict[str, Any]]


def checked(element: tuple[Where, Any], features: Features, skip_bad: bool) -> Iterator[tuple[Where, Any] | SetAside]:
    """What the sink takes for a `(where, example)` pair: `Rows` that fit the features, encoded
    (else their rows one by one, each checked so); an example as it is, for the sink to encode
    once; an input that could not be parsed (`Malformed`) set aside with `skip_bad`.

    Raises:
      BadInputError: an input that could not be parsed, without `skip_bad`.
    """
    where, example = element
    if isinstance(example, Rows):
        table, rows = features.encode_batch_or_rows(example.table, where, example.one_by_one)
        if table is not None:
            yield where, EncodedRows(table)
        for item in rows:
            yield from checked(item, features, skip_bad)
        return
    if not isinstance(example, Malformed):
        yield element
        return
    error = BadInputError(f"{where}: {example.reason}")
    if not skip_bad:
        raise error
    yield SetAside(bad_input(where, error))
