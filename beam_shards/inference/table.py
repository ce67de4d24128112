"""The summary of a record batch: its rows as objects, a field for each column."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import pyarrow as pa

from beam_shards.inference.arrow import summarize_arrow
from beam_shards.inference.kinds import First, Kinds
from beam_shards.inference.text import summarize_text_columns
from beam_shards.inference.strings import DEFAULT_IMAGE_COLUMN
from beam_shards.inference.values import fields_of_objects


def summarize_table(batch: pa.Table | pa.RecordBatch | Sequence[dict[str, Any]], *, cells: bool = False,
                    label_columns: Collection[str] = (), origin: First = ()) -> Kinds:
    """The summary of a batch of rows: `rows` and `objects` count them, `fields` holds a summary of
    each column. Merged with another batch's summary, a column one batch lacks counts as absent there.

    Example:
        >>> kinds = summarize_table([{"n": 1}, {"n": 2.5, "tag": "a"}])
        >>> kinds.objects, kinds.fields["n"].floats, kinds.fields["tag"].absent
        (2, 1, 1)

    Args:
      batch: an Arrow table or record batch, or rows as dicts of Python values (JSON lines a
        reader could not type alike).
      cells: string columns of `batch` hold CSV cells (`summarize_text`); others are typed
        values (`summarize_arrow`).
      label_columns: the columns whose distinct values to keep (in `labels`). Image paths are
        counted in the column named `image` alone (the one made an Image by default).
      origin: where the batch is in the input, comparable with every other batch's origin of a
        run: the order the columns are first seen in, whatever the order the summaries merge in.
    """
    if not isinstance(batch, (pa.Table, pa.RecordBatch)):
        rows = list(batch)
        fields = fields_of_objects(rows, origin, "", 0, labels=label_columns, paths=[DEFAULT_IMAGE_COLUMN])
        return Kinds(rows=len(rows), objects=len(rows), fields=fields)
    summary = Kinds(rows=batch.num_rows, objects=batch.num_rows)
    names = batch.schema.names
    text = {name: batch.column(place) for place, name in enumerate(names)
            if cells and pa.types.is_string(batch.schema.field(place).type)}
    of_text = summarize_text_columns(text, labels=label_columns, paths=[DEFAULT_IMAGE_COLUMN], origin=origin)
    for place, name in enumerate(names):
        kinds = of_text.get(name) or summarize_arrow(batch.column(place), labels=name in label_columns,
                                                     paths=name == DEFAULT_IMAGE_COLUMN, origin=origin, path=name)
        kinds.first = (*origin, 0, place)
        summary.fields[name] = kinds
    return summary
