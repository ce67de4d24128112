"""`beam-shards dedup PATH [--columns ...]`: a new version without the exact duplicate rows, the first of each kept
in row order, the count printed and in its metadata; the older version stays readable."""

from __future__ import annotations

import pytest

from beam_shards import ArrowBackend, Features, Value, list_versions, read_metadata, verify, write_shards
from beam_shards.cli.commands import main
from beam_shards.shards import duplicates

pytestmark = pytest.mark.timeout(60)

FEATURES = Features({"n": Value("int64"), "word": Value("string", nullable=True), "blob": Value("binary")})


def _rows(path: str, version: int | None = None) -> list[dict]:
    backend = ArrowBackend.open(path, version=version)
    return backend.slice(0, len(backend)).to_pylist()


def _cache(tmp_path, rows: list[dict]) -> str:
    path = str(tmp_path / "cache")
    write_shards(rows, path, FEATURES, shard_size_bytes=2_000, batch_size=7, compression="zstd",
                 metadata={"owner": "me"})
    return path


def _examples() -> list[dict]:
    words = ["a", "b", None, "", "a", "c"]
    return [{"n": i % 5, "word": words[i % 6], "blob": bytes([i % 3])} for i in range(90)]


@pytest.mark.parametrize("partition_bytes", [1 << 20, 200], ids=["one partition", "many partitions"])
def test_dedup_publishes_the_first_of_each_row_in_order_and_keeps_the_old_version(tmp_path, capsys, monkeypatch,
                                                                                  partition_bytes):
    monkeypatch.setattr(duplicates, "PARTITION_BYTES", partition_bytes)
    examples = _examples()
    path = _cache(tmp_path, examples)
    old = read_metadata(path)
    assert old.num_shards > 2, "the duplicates should span shards"
    first, seen = [], set()
    for row in examples:
        identity = tuple(row.values())
        if identity not in seen:
            seen.add(identity)
            first.append(row)
    assert main(["dedup", path]) == 0
    out = capsys.readouterr().out
    dropped = len(examples) - len(first)
    assert f"dropped {dropped} duplicate row(s) of 90 (by whole rows) from version 1: version 2 holds " in out
    new = read_metadata(path)
    assert new.version == 2 and _rows(path) == first
    assert new.metadata == {"owner": "me", "dedup": {"columns": "rows", "dropped": dropped}}
    assert (new.features, new.compression, new.column_types) == (old.features, old.compression, old.column_types)
    assert verify(path).ok
    assert _rows(path, version=1) == examples and [m.version for m in list_versions(path)] == [1, 2]


def test_dedup_by_columns_and_nothing_to_drop_and_an_unknown_column(tmp_path, capsys):
    examples = _examples()
    path = _cache(tmp_path, examples)
    assert main(["dedup", path, "--columns", "word", "n"]) == 0
    kept = _rows(path)
    first = {}
    for row in examples:
        first.setdefault((row["n"], row["word"]), row)
    assert kept == list(first.values()) and len(kept) == 25
    assert read_metadata(path).metadata["dedup"] == {"columns": ["word", "n"], "dropped": 90 - len(kept)}
    capsys.readouterr()
    assert main(["dedup", path, "--columns", "word", "n"]) == 0
    assert "no duplicate rows in version 2" in capsys.readouterr().out and read_metadata(path).version == 2
    assert main(["dedup", path, "--columns", "nope"]) == 2
    assert "has no column 'nope' to compare rows by; its columns: n, word, blob" in capsys.readouterr().err
