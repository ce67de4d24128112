"""Summaries of raw batches (`beam_shards.inference` kinds), with the first bad row met, merged into the features.

`Summarizer(...)(batch)` sums up one raw batch, `merge` two summaries in any grouping (it is
what a Beam combine calls), and `Summarizer.features` turns the summary of every row into
the features the pipeline converts with, and the lines naming the columns that widened.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from beam_shards import FeatureError, Features
from beam_shards.features import MAX_DEPTH, json_text_depth
from beam_shards.inference import Kinds, NullTokens, features_of, merge as merge_kinds, summarize_table
from pipelines.bad_inputs import Malformed
from pipelines.raw_batches import RawBatch


class Summary:
    """What the rows of some raw batches hold (`kinds`), and the first bad row met
    (`problem`: its file, line and reason), for when no row could be read."""

    def __init__(self, kinds: Kinds | None = None, problem: tuple[str, int, str] | None = None):
        self.kinds = kinds or Kinds()
        self.problem = problem

    @property
    def rows(self) -> int:
        return self.kinds.objects

    def __repr__(self) -> str:
        return f"Summary({self.rows} rows)"


def merge(a: Summary, b: Summary) -> Summary:
    """The summary of the rows of `a` and of `b`."""
    problems = [problem for problem in (a.problem, b.problem) if problem is not None]
    return Summary(merge_kinds(a.kinds, b.kinds), min(problems) if problems else None)


class Summarizer:
    """Sums up raw batches of a format, and makes features of their summary.

    Args:
      text: CSV (cells are text, `null_tokens` make them null) rather than JSON.
      null_tokens: the CSV cells that are null.
      label_column: the column made a ClassLabel of every class its rows hold.
      image_columns: the columns of image paths; None: the column `image` when it holds them.
      classes: the label's class names when the run pins them (`--classes`), else None.
      skip_bad: a label outside `classes` is a bad input of its row, not an error.
    """

    def __init__(self, text: bool, null_tokens: NullTokens | None = None, label_column: str | None = None,
                 image_columns: Sequence[str] | None = None, classes: Sequence[str] | None = None,
                 skip_bad: bool = False):
        self.text = text
        self.null_tokens = null_tokens or NullTokens.parse(None)
        self.label_column = label_column
        self.image_columns = image_columns
        self.classes = classes
        self.skip_bad = skip_bad

    def __call__(self, batch: RawBatch) -> Summary:
        origin = (batch.path, batch.first_line)
        labels = [self.label_column] if self.label_column else []
        table, problem = batch.table, None
        if table is None:
            good = [row for _, row in batch.rows if not isinstance(row, Malformed)]
            bad = next(((line, raw) for line, raw in batch.rows if isinstance(raw, Malformed)), None)
            problem = None if bad is None else (batch.path, bad[0], bad[1].reason)
            if not self.text:
                return Summary(summarize_table(good, label_columns=labels, origin=origin), problem)
            names = list(dict.fromkeys(name for row in good for name in row))
            table = pa.table({name: pa.array([row.get(name) for row in good], pa.string()) for name in names})
        if self.text:
            table = pa.table({name: _without_deep_json(self.null_tokens.apply(name, column.combine_chunks()))
                              for name, column in zip(table.column_names, table.columns)})
        return Summary(summarize_table(table, cells=self.text, label_columns=labels, origin=origin), problem)

    def features(self, summary: Summary) -> tuple[Features, list[str]]:
        """The features of the rows `summary` sums up, and a line for each column that widened.

        Raises:
          FeatureError: no row could be read (naming the first bad one), or what `features_of` raises.
        """
        if not summary.rows and summary.problem is not None:
            path, line, reason = summary.problem
            raise FeatureError(f"no row could be read: {path}, line {line}: {reason}")
        return features_of(summary.kinds, image_columns=self.image_columns, label_column=self.label_column,
                           classes=self.classes, skip_bad=self.skip_bad)


def _without_deep_json(cells: pa.Array) -> pa.Array:
    """CSV cells with the JSON ones nested past `MAX_DEPTH` made null: bad inputs the conversion
    names (by file, line and column), not text that would make the column a string."""
    looks = pc.fill_null(pc.match_substring_regex(cells, r"^\s*[\[{]"), False)
    if not pc.any(looks).as_py():
        return cells
    deep = [looking and json_text_depth(cell.encode("utf-8", "surrogatepass")) > MAX_DEPTH
            for looking, cell in zip(looks.to_pylist(), cells.to_pylist())]
    return pc.if_else(pa.array(deep), pa.scalar(None, pa.string()), cells) if any(deep) else cells


def first_rows(batch: RawBatch, rows: int) -> RawBatch:
    """The batch's first `rows` rows (rows read: bad ones do not count)."""
    if batch.table is not None:
        return RawBatch(batch.path, batch.first_line, batch.last_line, table=batch.table.slice(0, rows))
    kept: list[tuple[int, Any]] = []
    count = 0
    for line, raw in batch.rows:
        if count == rows:
            break
        kept.append((line, raw))
        count += not isinstance(raw, Malformed)
    return RawBatch(batch.path, batch.first_line, batch.last_line, rows=kept)


def one_column(batch: RawBatch, column: str) -> RawBatch:
    """The batch with one column alone (for the label's classes past the rows types come from)."""
    if batch.table is not None:
        names = [column] if column in batch.table.column_names else []
        return RawBatch(batch.path, batch.first_line, batch.last_line, table=batch.table.select(names))
    rows = [(line, raw if isinstance(raw, Malformed) else {key: raw[key] for key in raw if key == column})
            for line, raw in batch.rows]
    return RawBatch(batch.path, batch.first_line, batch.last_line, rows=rows)
