"""Summaries merge in any order and grouping to the summary of the whole, and the summary of CSV
cells is the summary of the values a cell-by-cell reader (pandas' rules) reads from them."""

from __future__ import annotations

import pickle
import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from beam_shards.features import load_bounded
from beam_shards.inference import (Kinds, features_of, merge, merge_all, summarize_arrow, summarize_table,
                                   summarize_text, summarize_values)

_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

cells = st.one_of(
    st.none(),
    st.integers(-2**70, 2**70).map(str),
    st.floats(allow_nan=False).map(repr),
    st.sampled_from(["true", "FALSE", "tRue", "0E0", " 7 ", "+3", "-0", ".5", "5.", "inf", "-Infinity", "nan", "1_0",
                     "0x1", "1e", "a.jpg", "b.PNG", "2020-01-01", "2020-02-30", "2020-01-01T10:00",
                     "2020-01-01 10:00:00.5Z", "2020-01-01T10:00+02", "[1, 2]", '{"a": [1.5]}', "[1, ", "{}", "[]",
                     "[" * 64 + "]" * 64, "[" * 65 + "]" * 65]),
    st.text(alphabet=" \t+-.eE0123456789infatyINF[]{}\",:Z-T", max_size=12),
    st.text(max_size=8),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**65, 2**65) | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["2020-01-01", "2020-01-01T10:00:00Z", "x.jpg", "text"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from("abc"), children, max_size=3),
    max_leaves=12)
rows = st.lists(st.dictionaries(st.sampled_from(["a", "b", "c", "label"]), json_values, max_size=4), max_size=12)


def _split(items: list, seed: int) -> list[list]:
    """`items` cut into runs at random places (some empty)."""
    chance = random.Random(seed)
    cuts = sorted(chance.randint(0, len(items)) for _ in range(chance.randint(0, 4)))
    return [items[start:end] for start, end in zip([0, *cuts], [*cuts, len(items)])]


def _merged_in_any_order(summaries: list[Kinds], seed: int) -> Kinds:
    """The summaries merged pairwise in a random grouping and order, as a combine may."""
    chance = random.Random(seed)
    pool = list(summaries) or [Kinds()]
    while len(pool) > 1:
        a, b = pool.pop(chance.randrange(len(pool))), pool.pop(chance.randrange(len(pool)))
        pool.append(merge(a, b))
    return pool[0]


@_SETTINGS
@given(st.lists(cells, max_size=40), st.integers(0, 2**32))
def test_csv_cells_summarized_in_batches_merge_to_the_whole(column, seed):
    array = pa.array(column, pa.large_string() if seed % 2 else pa.string())
    whole = summarize_text(array, labels=True)
    parts, start = [], 0
    for part in _split(column, seed):  # slices of one array: values at an offset in its buffers
        parts.append(summarize_text(array.slice(start, len(part)), labels=True))
        start += len(part)
    assert _merged_in_any_order(parts, seed) == whole


@_SETTINGS
@given(st.lists(st.lists(cells, max_size=6), min_size=1, max_size=30), st.sampled_from(["c0", "image", "label"]))
def test_columns_of_cells_summarized_together_are_each_summarized_alone(columns, named):
    """A wide table's columns are classified together (`summarize_table`); each summary is the one
    its column gets alone, a label column's distinct cells and the image column's paths too."""
    rows = max(map(len, columns))
    table = pa.table({f"c{i}" if i else named: pa.array(cells + [None] * (rows - len(cells)), pa.string())
                      for i, cells in enumerate(columns)})
    together = summarize_table(table, cells=True, label_columns=["label"])
    for name in table.column_names:
        alone = summarize_text(table[name], labels=name == "label", paths=name == "image", path=name)
        alone.first = together.fields[name].first
        assert together.fields[name] == alone, name


@_SETTINGS
@given(rows, st.integers(0, 2**32))
def test_json_rows_summarized_in_batches_merge_to_the_whole(batch, seed):
    whole = summarize_table(batch, label_columns=["label"])
    parts = [summarize_table(part, label_columns=["label"], origin=(number,))
             for number, part in enumerate(_split(batch, seed))]
    merged = _merged_in_any_order(parts, seed)
    assert merged == whole
    if any(batch):
        assert features_of(merged) == features_of(whole)
        assert list(features_of(merged)[0]) == list(dict.fromkeys(key for row in batch for key in row))


def read_cell(cell: str):
    """What one CSV cell holds, read alone by Python's own parsers, as pandas reads it."""
    if cell.lower() in ("true", "false"):
        return cell.lower() == "true"
    core = cell.strip(" \t")
    if core.isascii() and "_" not in core and "nan" not in core.lower() and not any(c.isspace() for c in core):
        for number in (int, float):
            try:
                return number(core)
            except ValueError:
                pass
    if cell.startswith(("[", "{")):
        try:
            return load_bounded(cell)
        except ValueError:
            pass
    return cell


number_cells = st.text(alphabet=" \t+-.0123456789eExXinfatyINF_", max_size=6)


@_SETTINGS
@given(st.lists(cells, max_size=40) | st.lists(number_cells, max_size=40)
       | st.lists(st.integers(-2**66, 2**66).map(str) | st.floats(allow_nan=False).map(repr), max_size=20))
def test_csv_cells_summarize_as_the_values_they_hold(column):
    as_text = summarize_text(pa.array(column, pa.string()))
    as_values = summarize_values([None if cell is None else read_cell(cell) for cell in column])
    as_text.cells = 0
    assert as_text == as_values


@_SETTINGS
@given(st.lists(st.dictionaries(st.sampled_from("abc"), st.none() | st.integers(-5, 5) | st.text(max_size=3)
                                | st.lists(st.booleans(), max_size=2), max_size=3), max_size=10))
def test_arrow_columns_summarize_as_their_python_values(batch):
    """pyarrow's reader cannot tell a missing key from a null: the values are read with Nones for both."""
    keys = list(dict.fromkeys(key for row in batch for key in row))
    if not keys:
        return  # an Arrow table without columns has no rows
    try:
        table = pa.table({key: pa.array([row.get(key) for row in batch]) for key in keys})
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return  # kinds pyarrow cannot hold in one column: the reader falls back to Python values
    filled = [{key: row.get(key) for key in keys} for row in batch]
    assert summarize_table(table) == summarize_table(filled)


def test_features_order_columns_by_first_sight_whatever_the_merge_order():
    batches = [[{"z": 1}], [{"a": 1, "z": 2}], [{"m": {"y": 1, "x": 2}}]]
    summaries = [summarize_table(batch, origin=(number,)) for number, batch in enumerate(batches)]
    for seed in range(6):
        features, _ = features_of(_merged_in_any_order(summaries, seed))
        assert list(features) == ["z", "a", "m"] and list(features["m"].fields) == ["y", "x"]


@pytest.mark.parametrize("values", [[1, None, 2], ["a", None], [[1], None, []], [{"a": 1}, None, {"b": "x"}]])
def test_a_summary_pickles_small(values):
    kinds = merge_all([summarize_arrow(pa.array(values * 1000))])
    assert len(pickle.dumps(kinds)) < 2000 and pickle.loads(pickle.dumps(kinds)) == kinds
