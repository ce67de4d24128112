"""CSV columns are inferred as pandas reads them (the reader under HF's `load_dataset("csv")`):
the same null tokens, and the same kind for columns of numbers, bools and text."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from beam_shards.inference import NA_VALUES, features_of, summarize_table

pd = pytest.importorskip("pandas")

# Our dtype and the dtype pandas gives the same column.
AS_PANDAS = {"int64": "int64", "uint64": "uint64", "float64": "float64", "bool": "bool", "string": "str"}
cells = st.one_of(
    st.integers(-2**64, 2**64).map(str),
    st.floats(allow_nan=False).map(repr),
    st.sampled_from(["true", "False", "TRUE", "tRuE", " 7", "8 ", "\t4", "+3", "-0", ".5", "5.", "1e5", "1.5e+3",
                     "inf", "-Infinity", "+inf", "nan", "NaN", "-nan", "0E0", "1e", "abc", "0x1", "1_0", "١", "+", "."]),
    st.text(alphabet=" \t+-.eE0123456789infatyINF", min_size=1, max_size=6),
)


def pandas_dtype(cells: list[str]) -> str:
    """The dtype pandas reads a CSV column of `cells` as, with no null tokens. A second column
    keeps each line from being blank: pandas skips a line of spaces alone, so a one-column file
    would lose the cell rather than read it."""
    text = "x,y\n" + "".join(cell + ",0\n" for cell in cells)
    return str(pd.read_csv(io.StringIO(text), keep_default_na=False, na_filter=False)["x"].dtype).replace("object",
                                                                                                          "str")


def our_dtype(cells: list[str]) -> str:
    features, _ = features_of(summarize_table(pa.table({"x": pa.array(cells, pa.string())}), cells=True))
    return AS_PANDAS[features["x"].dtype]


def test_the_default_null_tokens_are_pandas():
    from pandas._libs.parsers import STR_NA_VALUES

    assert set(NA_VALUES) == STR_NA_VALUES and len(NA_VALUES) == len(STR_NA_VALUES)


@pytest.mark.parametrize("column", [
    ["1", " 2", "+3", "007", "-4 "], ["1", "2.5", ".5", "5.", "1e5"], ["inf", "-Infinity", "INF", "1", "2"],
    ["True", "false", "TRUE", "tRuE", "False"], ["True", "1", "0", "false", "2"], ["0E0", "ABC", "1", "2", "3"],
    ["a", "b"], ["0x10", "1"], ["nan", "1"], ["18446744073709551615", "1"], ["0", " "], ["1.5", "\t"],
], ids=["ints", "floats", "infinities", "bools", "bools and ints", "codes", "text", "hex", "nan", "uint64", "spaces",
        "tab"])
def test_pandas_reads_the_same_csv_columns_as_the_same_kinds(column):
    assert our_dtype(column) == pandas_dtype(column)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(cells, min_size=1, max_size=6))
def test_any_column_of_numbers_bools_and_text_is_read_as_pandas_reads_it(column):
    theirs = pandas_dtype(column)
    if theirs == "str" and any(len(cell.strip(" \t+-")) > 18 for cell in column):
        return  # ints past 64 bits: pandas holds Python ints no Arrow type holds; here they are float64
    assert our_dtype(column) == theirs
