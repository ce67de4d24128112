"""CSV and JSON Lines as users have them (issue 36): each case a generated file that reproduces
what real files did (palmerpenguins' 'NA', cars' float at line 195, airports' `0E0` codes,
ISO dates, keys missing from some rows), converted with no flags, and checked value by value."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys

import pandas as pd
import pytest

from beam_shards import FeatureError, Features, ShardedDataset, Value
from pipelines import common, csv as csv_pipeline, jsonl, summaries, tabular
from pipelines.raw_batches import RawBatch

from _paths import REPO

pytestmark = pytest.mark.timeout(180)


def convert(pipeline, path, out, *flags: str):
    return pipeline.run(["--input", str(path), "--output", str(out), "--runner=FnApiRunner", "--progress", "0",
                         *flags])


def test_palmerpenguins_na_markers_are_null_like_pandas(tmp_path):
    # As penguins.csv writes them: R's NA in numbers and in text, quoted text, an int column.
    lines = ['"species","island","bill_length_mm","body_mass_g","sex","year"']
    for i in range(300):
        bill = "NA" if i in (3, 271) else f"{39 + i % 10}.{i % 10}"
        mass = "NA" if i in (3, 271) else str(3000 + 25 * i)
        sex = "NA" if i % 37 == 3 else ("male" if i % 2 else "female")
        lines.append(f'"Adelie","Torgersen",{bill},{mass},"{sex}",{2007 + i % 3}')
    (tmp_path / "penguins.csv").write_text("\n".join(lines) + "\n")
    manifest = convert(csv_pipeline, tmp_path / "penguins.csv", tmp_path / "out")
    assert manifest.features["bill_length_mm"] == Value("float64", nullable=True)
    assert manifest.features["body_mass_g"] == Value("int64", nullable=True)
    assert manifest.features["sex"] == Value("string", nullable=True)
    expected = pd.read_csv(tmp_path / "penguins.csv").astype(object).where(lambda frame: frame.notna(), None)
    assert list(ShardedDataset(str(tmp_path / "out"))) == [
        {name: (int(value) if name in ("body_mass_g", "year") and value is not None else value)
         for name, value in row.items()} for row in expected.to_dict("records")]


def test_a_float_late_in_a_column_of_ints_widens_it_and_the_run_says_so(tmp_path, capsys):
    rows = [{"name": f"car {i}", "mpg": 18 + i % 7} for i in range(406)]
    rows[193]["mpg"] = 27.5  # line 194; cars.jsonl turned at line 195
    rows[194]["mpg"] = 31.9
    (tmp_path / "cars.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    manifest = convert(jsonl, tmp_path / "cars.jsonl", tmp_path / "out")
    assert manifest.features["mpg"] == Value("float64", nullable=True)
    # CSV cells keep the spelling of each number, so the run names the column it widened.
    (tmp_path / "cars.csv").write_text("name,mpg\n" + "".join(f"{row['name']},{row['mpg']}\n" for row in rows))
    capsys.readouterr()
    assert convert(csv_pipeline, tmp_path / "cars.csv", tmp_path / "csv").features["mpg"] == Value("float64",
                                                                                                  nullable=True)
    assert "Widened column mpg: ints and floats -> float64" in capsys.readouterr().out
    assert [row["mpg"] for row in ShardedDataset(str(tmp_path / "out"))] == [float(row["mpg"]) for row in rows]


def test_with_infer_rows_a_late_text_fails_naming_its_line_and_no_internal_column(tmp_path):
    rows = [{"mpg": 18 + i % 7} for i in range(300)]
    rows[194]["mpg"] = "unknown"
    (tmp_path / "cars.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(common.BadInputError) as raised:
        convert(jsonl, tmp_path / "cars.jsonl", tmp_path / "out", "--infer_rows", "100")
    assert "cars.jsonl, line 195" in str(raised.value) and "mpg" in str(raised.value)
    assert "__beam_shards" not in str(raised.value)


def test_codes_like_0E0_stay_text_and_keep_their_spelling(tmp_path):
    codes = ["00M", "0E0", "1E9", "A01", "0E0", "123"]
    (tmp_path / "airports.csv").write_text("code,name,lat\n" + "".join(
        f"{code},Airport {i},{40 + i / 8}\n" for i, code in enumerate(codes * 40)))
    manifest = convert(csv_pipeline, tmp_path / "airports.csv", tmp_path / "out")
    assert manifest.features["code"] == Value("string", nullable=True)
    assert [row["code"] for row in ShardedDataset(str(tmp_path / "out"))] == codes * 40


def test_iso_dates_and_datetimes_become_dates_and_timestamps(tmp_path):
    days = [datetime.date(2012, 1, 1) + datetime.timedelta(days=i) for i in range(150)]
    (tmp_path / "weather.csv").write_text("date,when,weather\n" + "".join(
        f"{day.isoformat()},{day.isoformat()} 0{i % 10}:30:00,sun\n" for i, day in enumerate(days)))
    (tmp_path / "weather.jsonl").write_text("".join(json.dumps(
        {"date": day.isoformat(), "when": f"{day.isoformat()}T0{i % 10}:30:00", "weather": "sun"}) + "\n"
        for i, day in enumerate(days)))
    for pipeline, name in ((csv_pipeline, "weather.csv"), (jsonl, "weather.jsonl")):
        manifest = convert(pipeline, tmp_path / name, tmp_path / name.replace(".", "_"))
        assert manifest.features["date"] == Value("date32", nullable=True)
        assert manifest.features["when"] == Value("timestamp[us]", nullable=True)
        read = list(ShardedDataset(str(tmp_path / name.replace(".", "_"))))
        assert [row["date"] for row in read] == days
        assert read[3]["when"] == datetime.datetime(2012, 1, 4, 3, 30)


def test_a_date_that_is_no_date_keeps_the_column_text(tmp_path):
    (tmp_path / "d.csv").write_text("d\n2021-02-28\n2021-02-30\n")
    manifest = convert(csv_pipeline, tmp_path / "d.csv", tmp_path / "out")
    assert manifest.features["d"] == Value("string", nullable=True)


@pytest.mark.parametrize("given", [False, True], ids=["inferred", "--features"])
def test_a_key_missing_from_some_rows_is_null(tmp_path, given):
    rows = [{"text": f"t{i}", **({"score": i / 4} if i % 3 else {})} for i in range(250)]
    rows[220]["late"] = "only here"
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    flags = []
    if given:
        features = Features({"text": Value("string"), "score": Value("float32", nullable=True),
                             "late": Value("string", nullable=True)})
        (tmp_path / "f.json").write_text(json.dumps(features.to_dict()))
        flags = ["--features", str(tmp_path / "f.json")]
    manifest = convert(jsonl, tmp_path / "m.jsonl", tmp_path / "out", *flags)
    assert manifest.features["late"] == Value("string", nullable=True)
    read = list(ShardedDataset(str(tmp_path / "out")))
    assert [row["score"] for row in read] == [i / 4 if i % 3 else None for i in range(250)]
    assert [row["late"] for row in read if row["late"]] == ["only here"]


def test_a_key_missing_where_the_features_require_it_names_the_line_and_the_field(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"a": 1, "b": 2}\n{"a": 3}\n')
    (tmp_path / "f.json").write_text(json.dumps(Features({"a": Value("int64"), "b": Value("int64")}).to_dict()))
    with pytest.raises(common.BadInputError) as raised:
        convert(jsonl, tmp_path / "m.jsonl", tmp_path / "out", "--features", str(tmp_path / "f.json"))
    assert "m.jsonl, line 2" in str(raised.value) and "'b'" in str(raised.value)
    assert "the features declare 'a', 'b')" in str(raised.value)  # not the write's own key column


def test_na_values_replace_the_defaults_and_per_column(tmp_path):
    (tmp_path / "m.csv").write_text("name,weight\nNA,-1\n-,-\nNone,3\n")
    manifest = convert(csv_pipeline, tmp_path / "m.csv", tmp_path / "out", "--na_values", "-", "weight=-1",
                       "weight=-")
    assert manifest.features["weight"] == Value("int64", nullable=True)
    assert list(ShardedDataset(str(tmp_path / "out"))) == [
        {"name": "NA", "weight": None}, {"name": None, "weight": None}, {"name": "None", "weight": 3}]


def test_with_features_na_is_null_where_nullable_and_text_elsewhere(tmp_path):
    (tmp_path / "m.csv").write_text("n,s,t\n1,NA,NA\nNA,b,c\n")
    features = Features({"n": Value("int64", nullable=True), "s": Value("string", nullable=True),
                         "t": Value("string")})
    (tmp_path / "f.json").write_text(json.dumps(features.to_dict()))
    convert(csv_pipeline, tmp_path / "m.csv", tmp_path / "out", "--features", str(tmp_path / "f.json"))
    assert list(ShardedDataset(str(tmp_path / "out"))) == [{"n": 1, "s": None, "t": "NA"},
                                                          {"n": None, "s": "b", "t": "c"}]


def test_label_classes_come_from_every_row_in_the_same_read(tmp_path):
    (tmp_path / "m.csv").write_text("x,label\n" + "".join(f"{i},{'cat' if i < 250 else 'dog'}\n" for i in range(260)))
    manifest = convert(csv_pipeline, tmp_path / "m.csv", tmp_path / "out", "--label_column", "label")
    assert manifest.features["label"].names == ["cat", "dog"]
    assert [row["label"] for row in ShardedDataset(str(tmp_path / "out"))][-1] == 1


def test_numbers_and_text_in_one_column_widen_to_text_and_are_named():
    summarize = summaries.Summarizer(False)
    first = summarize(RawBatch("m.jsonl", 1, 1, rows=[(1, {"v": 1})]))
    second = summarize(RawBatch("m.jsonl", 2, 2, rows=[(2, {"v": "one"}), (3, common.Malformed("bad"))]))
    merged = summaries.merge(second, first)
    features, widened = summarize.features(merged)
    assert features["v"] == Value("string", nullable=True) and widened == ["v: ints and strings -> string"]
    assert merged.problem == ("m.jsonl", 3, "bad")


def test_no_row_to_infer_from_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "m.csv").write_text("a,b\n")
    with pytest.raises(SystemExit) as exit_info:
        convert(csv_pipeline, tmp_path / "m.csv", tmp_path / "out")
    assert exit_info.value.code == 2 and "holds no row after its header" in capsys.readouterr().err
    with pytest.raises(FeatureError, match="no row could be read: m.jsonl, line 2: bad"):
        summaries.Summarizer(False).features(summaries.Summary(problem=("m.jsonl", 2, "bad")))


def test_beam_shards_infer_prints_a_features_file_the_pipeline_takes(tmp_path):
    (tmp_path / "m.csv").write_text("id,v,code,day\n1,2,0E0,2020-01-01\n2,NA,ABC,2020-01-02\n3,2.5,X,\n")
    env_argv = [sys.executable, "-m", "pipelines.infer", str(tmp_path / "m.csv")]
    printed = subprocess.run(env_argv, capture_output=True, text=True, cwd=REPO, timeout=120,
                             env={"PYTHONPATH": REPO, "PATH": "/usr/bin:/bin"})
    assert printed.returncode == 0, printed.stderr
    features = Features.from_json(printed.stdout)
    assert features == Features({"id": Value("int64", nullable=True), "v": Value("float64", nullable=True),
                                 "code": Value("string", nullable=True), "day": Value("date32", nullable=True)})
    (tmp_path / "f.json").write_text(printed.stdout)
    manifest = convert(csv_pipeline, tmp_path / "m.csv", tmp_path / "out", "--features", str(tmp_path / "f.json"))
    assert manifest.features == features


def test_beam_shards_infer_without_a_known_extension_asks_for_the_format(tmp_path, capsys):
    from pipelines import infer

    (tmp_path / "data.txt").write_text('{"a": 1}\n')
    with pytest.raises(SystemExit) as exit_info:
        infer.main(["infer", str(tmp_path / "data.txt")])
    assert exit_info.value.code == 2 and "--format" in capsys.readouterr().err
    assert infer.main(["infer", str(tmp_path / "data.txt"), "--format", "jsonl"]) == 0
    assert json.loads(capsys.readouterr().out) == {"a": {"_type": "Value", "dtype": "int64", "nullable": True}}


def test_beam_shards_infer_reads_parquet_and_tfrecord_as_their_pipelines_do(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines import infer, parquet, tfrecord
    from test_tfrecord import row, write

    pq.write_table(pa.table({"n": [1, 2], "s": ["x", None]}), tmp_path / "t.parquet")
    assert infer.main(["infer", str(tmp_path / "t.parquet")]) == 0
    assert Features.from_json(capsys.readouterr().out) == parquet.infer_features(
        parquet.read_schema(str(tmp_path / "t.parquet")))
    write(tmp_path / "t.tfrecord", [row(i) for i in range(4)])
    assert infer.main(["infer", str(tmp_path / "t.tfrecord"), "--label_column", "label"]) == 0
    printed = Features.from_json(capsys.readouterr().out)
    converted = tfrecord.run(["--input", str(tmp_path / "t.tfrecord"), "--output", str(tmp_path / "out"),
                              "--label_column", "label", "--runner=FnApiRunner", "--progress", "0"])
    assert printed == converted.features


def test_inference_over_every_row_reads_each_input_once(tmp_path, monkeypatch):
    # The summaries and the cast share one read: the combine, not a second pass over the files.
    read = []

    def counting(path, *args):
        read.append(path)
        return original(path, *args)

    original = tabular.read_file
    monkeypatch.setattr(tabular, "read_file", counting)
    for part in range(2):
        (tmp_path / f"m{part}.csv").write_text("n,label\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(300)))
    manifest = convert(csv_pipeline, tmp_path / "m*.csv", tmp_path / "out", "--label_column", "label")
    assert manifest.num_rows == 600 and manifest.features["n"] == Value("int64", nullable=True)
    assert sorted(read) == sorted(str(tmp_path / f"m{part}.csv") for part in range(2))
