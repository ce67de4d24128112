"""A small local csv or jsonl conversion, and a local image folder's, run in this process without Beam
(`local_write`, `tabular_local`): the same shard bytes, bad-input list, metadata and errors as on a
Beam runner; any Beam flag, a large (csv, jsonl) or remote input, a remote output or --dedup runs on Beam."""

from __future__ import annotations

import argparse
import json
import os
import random

import pytest

from beam_shards import Features, Value, read_metadata
from beam_shards.versions.bad_inputs import read_bad_inputs
from pipelines import common, csv as csv_pipeline, image_folder, jsonl, local_write, tabular_local

from _support import jpeg, png
from test_deterministic import shard_digests

pytestmark = pytest.mark.timeout(300)

SMALL = ["--shard_size", "8KB", "--batch_size", "16", "--progress", "0"]
ON_BEAM = "--runner=FnApiRunner"


@pytest.fixture
def engines(monkeypatch) -> list[str]:
    """Which engine each run took: "in process" (it writes with `write_here`), or "beam" (a run on Beam
    plans its steps)."""
    ran = []
    for module in (tabular_local, image_folder):
        monkeypatch.setattr(module, "write_here", _recording(ran, "in process", local_write.write_here))
    plan = __import__("pipelines.tabular_beam", fromlist=["plan"]).plan
    monkeypatch.setattr("pipelines.tabular_beam.plan", _recording(ran, "beam", plan))
    monkeypatch.setattr(image_folder, "plan", _recording(ran, "beam", image_folder.plan))
    return ran


def _recording(ran: list[str], name: str, function):
    return lambda *args: ran.append(name) or function(*args)


def _csv_input(root) -> list[str]:
    """Two CSV files with images, a malformed line and a row whose image is missing (refused by the write)."""
    (root / "img").mkdir()
    for i in range(8):
        (root / "img" / f"{i}.png").write_bytes(png(i, size=8))
    for part in range(2):
        rows = [f"img/{i % 8}.png,{'cat' if i % 3 else 'dog'},{i},{i * 0.5 if i % 7 else 'NA'}"
                for i in range(part * 150, part * 150 + 150)]
        rows[20] = "img/0.png,cat,only three fields"
        rows[40] = f"img/missing-{part}.png,cat,{part},1.5"
        (root / f"part-{part}.csv").write_text("image,label,n,x\n" + "\n".join(rows) + "\n")
    return ["--input", str(root / "part-*.csv"), "--label_column", "label"]


def _jsonl_input(root) -> list[str]:
    path = root / "chat.jsonl"
    lines = [json.dumps({"messages": [{"role": "user", "content": f"hi {i}"}] * (1 + i % 3),
                         "meta": {"n": i, "score": None if i % 5 == 0 else i / 3}}) for i in range(400)]
    lines[33] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    return ["--input", str(path)]


def _sparse_lists_input(root) -> list[str]:
    """Lists of text mostly empty, and lists of lists: once the write in process laid their rows out
    otherwise than a run read back does, and wrote the same rows in other bytes."""
    path = root / "lists.jsonl"
    path.write_text("".join(json.dumps({"tags": ["red", "blue"] if i % 150 == 0 else [],
                                        "grid": [["a"] * (i % 3)] * (i % 2), "n": i}) + "\n" for i in range(2000)))
    return ["--input", str(path)]


def _image_folder_input(root) -> list[str]:
    """Class folders of JPEGs, one of them not a JPEG at all (refused by the write)."""
    for i in range(240):
        folder = root / "train" / ["ant", "bee", "cow"][i % 3] / ("deeper" if i % 5 == 0 else "")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:04d}.jpg").write_bytes(jpeg(i, size=8) if i != 77 else b"not a jpeg")
    return ["--input", str(root / "train")]


@pytest.mark.parametrize("pipeline, make_input, rows", [
    (csv_pipeline, _csv_input, 296), (jsonl, _jsonl_input, 399), (jsonl, _sparse_lists_input, 2000),
    (image_folder, _image_folder_input, 239)],
    ids=["csv", "jsonl", "jsonl of sparse lists", "image_folder"])
def test_in_process_and_on_beam_write_the_same_cache(tmp_path, engines, pipeline, make_input, rows):
    argv = make_input(tmp_path) + SMALL + ["--max_bad", "10"]
    here, beam = str(tmp_path / "here"), str(tmp_path / "beam")
    assert common.main(pipeline.run, argv + ["--output", here]) == 0
    assert common.main(pipeline.run, argv + ["--output", beam, ON_BEAM]) == 0
    assert engines == ["in process", "beam"]
    assert len(shard_digests(here)) >= 3, "the test should span several shards"
    assert shard_digests(here) == shard_digests(beam)
    mine, theirs = read_metadata(here), read_metadata(beam)
    assert mine.num_rows == theirs.num_rows == rows
    assert mine.features == theirs.features and mine.metadata == theirs.metadata
    skipped = {csv_pipeline: 4, jsonl: 1 if make_input is _jsonl_input else 0, image_folder: 1}[pipeline]
    assert mine.metadata["bad_inputs"]["skipped"] == skipped
    listed = [[{key: value for key, value in record.items() if key != "write_id"} for record in read_bad_inputs(path)]
              for path in (here, beam)]
    assert listed[0] == listed[1] and len(listed[0]) == skipped
    assert not os.path.exists(os.path.join(here, "_staging"))


@pytest.mark.parametrize("flags", [[], ["--max_bad", "1"]], ids=["without --skip_bad", "past --max_bad"])
def test_a_bad_input_fails_both_alike_and_publishes_nothing(tmp_path, engines, capsys, flags):
    argv = _csv_input(tmp_path) + SMALL + flags
    errors = []
    for output, beam in (("here", []), ("beam", [ON_BEAM])):
        assert common.main(csv_pipeline.run, argv + ["--output", str(tmp_path / output), *beam]) == 1
        errors.append(capsys.readouterr().err.replace(str(tmp_path / output), "OUT"))
        assert not os.path.exists(tmp_path / output / "_metadata.json")
    assert engines == ["in process", "beam"]
    assert errors[0] == errors[1] and ("part-0.csv, line 22" in errors[0]), errors


@pytest.mark.parametrize("flags", [["--mode", "error"], ["--mode", "append", "--features", "FEATURES"]],
                         ids=["a cache there, --mode error", "an append of other features"])
def test_what_the_output_refuses_is_said_before_any_input_is_read_in_both(tmp_path, engines, capsys, flags):
    (tmp_path / "f.json").write_text(json.dumps(Features({"n": Value("string")}).to_dict()))
    flags = [str(tmp_path / "f.json") if flag == "FEATURES" else flag for flag in flags]
    (tmp_path / "good.csv").write_text("n\n1\n2\n")
    (tmp_path / "bad.csv").write_text("n\n1\n2,3\n")
    errors = []
    for output, beam in (("here", []), ("beam", [ON_BEAM])):
        out = str(tmp_path / output)
        assert common.main(csv_pipeline.run, ["--input", str(tmp_path / "good.csv"), "--output", out, *SMALL]) == 0
        capsys.readouterr()
        assert common.main(csv_pipeline.run, ["--input", str(tmp_path / "bad.csv"), "--output", out, *SMALL, *flags,
                                              *beam]) == 1
        errors.append(capsys.readouterr().err.replace(out, "OUT"))
        assert read_metadata(out).version == 1
    assert errors[0] == errors[1] and "line 3" not in errors[0], errors


def test_the_features_of_an_empty_input_are_a_usage_error_in_process_too(tmp_path, engines, capsys):
    (tmp_path / "empty.csv").write_text("a,b\n")
    with pytest.raises(SystemExit) as exited:
        csv_pipeline.run(["--input", str(tmp_path / "empty.csv"), "--output", str(tmp_path / "out")])
    assert exited.value.code == 2 and "holds no row after its header" in capsys.readouterr().err
    assert engines == [], "the usage error came before anything was written, and without planning Beam steps"


def test_what_runs_on_beam(tmp_path, engines, monkeypatch):
    def problem(beam_args: list[str] = (), **flags) -> str | None:
        args = argparse.Namespace(**{"output": str(tmp_path / "out"), "input": str(tmp_path / "a.csv"), "dedup": None,
                                     **flags})
        return local_write.in_process_problem(args, list(beam_args))

    assert problem() is None
    assert "Beam flags given (--direct_num_workers=2" in problem(["--direct_num_workers=2"])
    assert "is not a local folder" in problem(output="gs://bucket/cache")
    assert "is not local" in problem(input="s3://bucket/a.csv")
    assert "--dedup" in problem(dedup=[])
    # Clean rows: every batch fits, so the write in process skips its run (`ordered_in_process`).
    (tmp_path / "a.csv").write_text("n,text\n" + "".join(f"{i},{'w' * (i % 37)}\n" for i in range(900)))
    size = os.path.getsize(tmp_path / "a.csv")
    monkeypatch.setattr(tabular_local, "IN_PROCESS_BYTES", size - 1)
    csv_pipeline.run(["--input", str(tmp_path / "a.csv"), "--output", str(tmp_path / "big"), *SMALL])
    monkeypatch.setattr(tabular_local, "IN_PROCESS_BYTES", size)
    csv_pipeline.run(["--input", str(tmp_path / "a.csv"), "--output", str(tmp_path / "small"), *SMALL])
    assert engines == ["beam", "in process"]
    assert len(shard_digests(str(tmp_path / "big"))) >= 3
    assert shard_digests(str(tmp_path / "big")) == shard_digests(str(tmp_path / "small"))


def _random_jsonl(path, seed: int) -> None:
    """Rows of columns of random kinds, nulls, missing keys and empty lists among them, in batches
    that fit the features and (a row of text among ints) batches that go row by row."""
    rng = random.Random(seed)
    kinds = rng.sample(["int", "float", "text", "texts", "ints", "struct", "grid", "mixed"], 5)
    values = {
        "int": lambda: rng.choice([None, rng.randint(-10**9, 10**9)]),
        "float": lambda: rng.choice([None, rng.random() / 10 ** rng.randint(0, 6)]),
        "text": lambda: "".join(rng.choice("ab é😀") for _ in range(rng.randint(0, 12))),
        "texts": lambda: ["q" * rng.randint(0, 5) for _ in range(rng.choice([0, 0, 0, 1, 3]))],
        "ints": lambda: [rng.randint(0, 9) for _ in range(rng.randint(0, 4))],
        "struct": lambda: {"a": rng.randint(0, 5), **({"b": "x" * rng.randint(0, 3)} if rng.random() < 0.5 else {})},
        "grid": lambda: [["g"] * rng.randint(0, 2) for _ in range(rng.randint(0, 2))],
        "mixed": lambda: rng.choice([rng.randint(0, 99), "text"]) if rng.random() < 0.01 else rng.randint(0, 99),
    }
    with open(path, "w") as handle:
        for _ in range(rng.randint(500, 3000)):
            row = {kind: values[kind]() for kind in kinds if rng.random() < 0.95}
            handle.write(json.dumps(row) + "\n")


def test_random_json_lines_give_the_same_cache_in_process_and_on_beam(tmp_path, engines):
    seeds = range(4)
    argvs = {}
    for seed in seeds:
        _random_jsonl(tmp_path / f"{seed}.jsonl", seed)
        argvs[seed] = ["--input", str(tmp_path / f"{seed}.jsonl"), "--batch_size", "64", "--shard_size", "16KB",
                       "--progress", "0"]
        jsonl.run(argvs[seed] + ["--output", str(tmp_path / f"{seed}-here")])
    common.run_conversions([jsonl.plan(argvs[seed] + ["--output", str(tmp_path / f"{seed}-beam"), ON_BEAM])
                            for seed in seeds])
    assert engines.count("in process") == len(seeds)
    for seed in seeds:
        here, beam = str(tmp_path / f"{seed}-here"), str(tmp_path / f"{seed}-beam")
        assert shard_digests(here) == shard_digests(beam), seed
        assert read_metadata(here).features == read_metadata(beam).features, seed


def test_an_append_in_process_is_the_append_on_beam(tmp_path, engines):
    argv = _csv_input(tmp_path) + SMALL + ["--max_bad", "10"]
    here, beam = str(tmp_path / "here"), str(tmp_path / "beam")
    for out in (here, beam):
        assert common.main(csv_pipeline.run, argv + ["--output", out]) == 0
    assert common.main(csv_pipeline.run, argv + ["--output", here, "--mode", "append"]) == 0
    assert common.main(csv_pipeline.run, argv + ["--output", beam, "--mode", "append", ON_BEAM]) == 0
    assert engines == ["in process", "in process", "in process", "beam"]
    mine, theirs = read_metadata(here), read_metadata(beam)
    assert mine.version == theirs.version == 2 and mine.num_rows == theirs.num_rows == 2 * 296
    assert shard_digests(here) == shard_digests(beam)
    assert mine.features == theirs.features and mine.metadata == theirs.metadata
