"""Random tables with nulls, late type changes and missing keys, converted through the csv and
jsonl pipelines with no flags: every value read back is the one a reference reader reads
(pandas with the same null tokens for CSV, json for JSON Lines), and the same input gives the
same shard bytes."""

from __future__ import annotations

import datetime
import hashlib
import json
import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from beam_shards import ShardedDataset, shard_paths
from pipelines import csv as csv_pipeline, jsonl

pytestmark = pytest.mark.timeout(600)

WORDS = st.sampled_from(["cat", "a dog", "0E0", "N/A", "NA", "", "x,y", 'say "hi"', "naïve", "1e5", "007"])
KINDS = ("int", "float", "text", "date")


def cell(kind: str, draw) -> object:
    if kind == "int":
        return draw(st.integers(-10**12, 10**12))
    if kind == "float":
        return draw(st.integers(-10**6, 10**6)) + 0.25
    if kind == "date":
        return (datetime.date(2000, 1, 1) + datetime.timedelta(days=draw(st.integers(0, 9000)))).isoformat()
    return draw(WORDS)


@st.composite
def tables(draw):
    """`(columns, rows)`: rows are dicts that may lack a key, with None for null, and a column's
    kind may change late (an int column turning float or text, a text value among dates)."""
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1, max_size=4, unique=True))
    kinds = {name: draw(st.sampled_from(KINDS)) for name in names}
    count = draw(st.integers(1, 60))
    late = {name: (draw(st.integers(0, count - 1)), draw(st.sampled_from(KINDS))) for name in names
            if draw(st.booleans())}
    rows = []
    for i in range(count):
        row = {}
        for name in names:
            roll = draw(st.integers(0, 9))
            if roll == 0:
                continue  # a missing key (an empty cell in CSV)
            kind = late[name][1] if name in late and i >= late[name][0] else kinds[name]
            row[name] = None if roll == 1 else cell(kind, draw)
        rows.append(row)
    return names, rows


def csv_text(names, rows) -> str:
    def quoted(value):
        text = "" if value is None else str(value)
        return f'"{text.replace(chr(34), chr(34) * 2)}"' if any(c in text for c in ',"\n') else text

    return ",".join(names) + "\n" + "".join(",".join(quoted(row.get(name)) for name in names) + "\n" for row in rows)


def digest(path) -> list[str]:
    return [hashlib.sha256(open(shard, "rb").read()).hexdigest() for shard in shard_paths(path)]


def convert(pipeline, path, out):
    return pipeline.run(["--input", str(path), "--output", str(out), "--runner=FnApiRunner", "--progress", "0"])


def same_csv_value(ours, text, dtype) -> bool:
    if isinstance(ours, bool):
        return text.lower() == str(ours).lower()
    if isinstance(ours, int):
        return int(text) == ours
    if isinstance(ours, float):
        return math.isclose(float(text), ours)
    if isinstance(ours, datetime.date):
        return datetime.date.fromisoformat(text) == ours
    return text == ours


def same_json_value(ours, value) -> bool:
    if isinstance(ours, str) and not isinstance(value, str):
        return ours == str(value)
    if isinstance(ours, datetime.date):
        return ours.isoformat() == value
    if isinstance(ours, float):
        return math.isclose(ours, float(value))
    return ours == value


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(tables())
def test_random_tables_convert_value_for_value(tmp_path_factory, table):
    names, rows = table
    root = tmp_path_factory.mktemp("table")
    (root / "t.csv").write_text(csv_text(names, rows), encoding="utf-8")
    (root / "t.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    try:
        reference = pd.read_csv(root / "t.csv", dtype=str, keep_default_na=True)
    except pd.errors.EmptyDataError:  # one column, every cell empty: every line is blank
        reference = pd.DataFrame(columns=names)
    if reference.empty:
        with pytest.raises(SystemExit):  # no row to infer from: a usage error
            convert(csv_pipeline, root / "t.csv", root / "csv")
        read = []
    else:
        convert(csv_pipeline, root / "t.csv", root / "csv")
        read = list(ShardedDataset(str(root / "csv")))
    assert len(read) == len(reference)
    for ours, theirs in zip(read, reference.to_dict("records")):
        for name in names:
            text = theirs[name]
            if isinstance(text, float) and math.isnan(text):
                assert ours[name] is None, (name, ours, theirs)
            else:
                assert same_csv_value(ours[name], text, None), (name, ours, theirs)
    present = [row for row in rows if row]
    if not present:
        return
    (root / "t.jsonl").write_text("".join(json.dumps(row) + "\n" for row in present), encoding="utf-8")
    convert(jsonl, root / "t.jsonl", root / "jsonl")
    read = list(ShardedDataset(str(root / "jsonl")))
    assert len(read) == len(present)
    for ours, row in zip(read, present):
        for name in ours:
            if row.get(name) is None:
                assert ours[name] is None
            else:
                assert same_json_value(ours[name], row[name]), (name, ours, row)
    before = digest(str(root / "jsonl"))
    convert(jsonl, root / "t.jsonl", root / "jsonl")
    assert digest(str(root / "jsonl")) == before
