"""`beam-shards info` prints each column's rows beside its nulls, merged across appends, for old caches too."""

from __future__ import annotations

from beam_shards import Features, Sequence, Value, cli, read_metadata, write_shards

from test_formats import saved

NULLABLE = Features({"x": Value("int64", nullable=True), "tags": Sequence(Value("string"), nullable=True)})


def statistics_lines(path: str, capsys) -> dict[str, str]:
    assert cli.main(["info", path]) == 0
    out = capsys.readouterr().out
    lines = out[out.index("\nstatistics\n") + 1:].splitlines()[1:]
    return {line.split()[0]: line.split(None, 1)[1] for line in lines if line.startswith("  ")}


def test_info_prints_rows_and_nulls_of_every_column_after_an_append(tmp_path, capsys):
    path = str(tmp_path / "cache")
    row = lambda i: {"x": None if i % 4 == 0 else i, "tags": None if i % 5 == 0 else ["a"] * (i % 3)}  # noqa: E731
    write_shards([row(i) for i in range(1, 1001)], path, NULLABLE, max_rows_per_shard=300)
    write_shards([row(i) for i in range(1001, 1234)], path, NULLABLE, mode="append")
    columns = read_metadata(path).statistics.columns
    assert (columns["x"].rows, columns["x"].nulls) == (1233, 308) and (columns["tags"].rows, columns["tags"].nulls) == (
        1233, 246)
    lines = statistics_lines(path, capsys)
    assert lines["x"] == "1,233 rows, 308 null, min 1, max 1233"
    assert lines["tags"] == f"1,233 rows, 246 null, {columns['tags'].items:,} items"


def test_info_prints_the_rows_of_a_format3_cache_and_says_format2_recorded_none(tmp_path, capsys):
    lines = statistics_lines(saved("format3_cache", tmp_path / "3"), capsys)
    assert lines["id"] == "40 rows, 0 null, min 0, max 39" and lines["tags"] == "40 rows, 0 null"
    assert cli.main(["info", saved("format2_cache", tmp_path / "2")]) == 0
    assert "statistics   not recorded (a version of format 1 or 2" in capsys.readouterr().out
