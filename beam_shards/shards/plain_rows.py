"""Plain rows (`Features.plain_values`) after their batch is built: its checks on a thread, and per-row
encoding for a batch that does not pass.

`Features.check_plain` (class ids in range, complete images) is numpy and Arrow work
that mostly runs without the GIL: on a worker thread it costs the thread that
gathers rows little. The batch is written only once its check is done, and a batch
that fails it goes back to per-row encoding, which names the bad row. The rows'
Python values are not kept meanwhile: built, a plain value comes back from the batch
as it went in (`plain_rows`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from beam_shards.errors import EncodeError
from beam_shards.features import Features
from beam_shards.shards.later import Later

# Below this many rows a batch is checked or encoded where it is given: a thread costs more than it saves.
THREADED_ROWS = 256
# The key of a buffered row that was encoded when added (any other row holds plain values).
ENCODED = object()


class CheckedBatch:
    """`batch`, built by `Features.build_plain`, with its `check_plain` running (on a thread
    for a batch of `THREADED_ROWS` rows or more); `passed()` waits for the verdict.

    Args:
      features: the features that built `batch`.
      batch: the rows, in `features.arrow_schema()`.
      keys: per row, its key, or `ENCODED` for a row encoded when added.
      examples: the examples as given, by row, where an error or `on_bad` needs them.
      encoded: the values of the rows encoded when added, by row.
    """

    def __init__(self, features: Features, batch: pa.RecordBatch, keys: list[Any], examples: dict[int, Any],
                 encoded: dict[int, tuple[Any, ...]]):
        self.features, self.batch, self.keys, self.examples, self.encoded = features, batch, keys, examples, encoded
        self._check = Later(features.check_plain, batch, threaded=batch.num_rows >= THREADED_ROWS)
        self.threaded = self._check.threaded

    def __repr__(self) -> str:
        return f"CheckedBatch(rows={self.batch.num_rows})"

    def passed(self) -> bool:
        """Waits for the check; whether every value passed.

        Raises:
          What the check raised other than a value that does not fit (MemoryError...).
        """
        return self._check.result()

    def plain_rows(self) -> list[tuple[Any, ...]]:
        """Every row's values in column order: the plain values each went in as (a built plain
        value decodes back to its own type and value), and the encoded rows' values as kept."""
        columns = [feature.decode(column, "bytes") for feature, column in zip(self.features.values(),
                                                                             self.batch.columns)]
        rows = list(zip(*columns))
        for row, values in self.encoded.items():
            rows[row] = values
        return rows


def encode_each(features: Features, rows: list[tuple[Any, ...]], keys: list[Any], examples: dict[int, Any],
                refuse: Callable[[Any, Any, EncodeError], None]) -> list[tuple[Any, ...]]:
    """`rows` with each plain row encoded by `Features.encode_values`, those that do not fit
    handed to `refuse(example, key, error)` and left out; a plain row's example is its values
    by name, unless `examples` keeps it as given."""
    names, encoded = tuple(features), []
    for row, (values, key) in enumerate(zip(rows, keys)):
        if key is ENCODED:
            encoded.append(values)
            continue
        example = examples[row] if row in examples else dict(zip(names, values))
        try:
            encoded.append(features.encode_values(example, key))
        except EncodeError as error:
            refuse(example, key, error)
    return encoded
