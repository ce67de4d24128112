"""The `beam-shards` command on real caches: info, verify, head, show and gc."""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys

import filelock
import numpy as np
import pyarrow
import pytest
from PIL import Image as PILImage

from beam_shards import Array, ClassLabel, Features, Image, Sequence, ShardedDataset, Value, read_metadata, write_shards
from beam_shards.cli import commands as cli
from beam_shards.cli.class_counts import class_counts
from beam_shards.display import human_size
from beam_shards.format.layout import BAD_INPUTS_NAME, LOCK_NAME, MANIFEST_NAME, new_write_id
from beam_shards.versions.bad_inputs import write_bad_inputs

from _paths import REPO
from _support import jpeg, png

NAMES = ["ant", "bee", "cow"]
TAGS = ["x", "y"]
FEATURES = Features({
    "id": Value("int64"),
    "image": Image(),
    "label": ClassLabel(names=NAMES),
    "tags": Sequence(ClassLabel(names=TAGS)),
    "vec": Array((3,), "float32"),
    "caption": Value("string"),
})
ROWS = 30


def make_example(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {
        "id": i,
        "image": jpeg(i, size=16 + i % 5) if i % 3 else png(i, size=12),
        "label": int(rng.integers(len(NAMES))),
        "tags": [int(t) for t in rng.integers(len(TAGS), size=i % 4)],
        "vec": rng.standard_normal(3).astype(np.float32),
        "caption": f"example {i}",
    }


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("cli") / "cache")
    write_shards((make_example(i) for i in range(ROWS)), path, FEATURES, shard_size_bytes=3000, batch_size=4,
                 metadata={"source": "test"})
    return path


@pytest.fixture
def cache(built_cache, tmp_path):
    """A fresh copy of the cache that a test may damage."""
    path = str(tmp_path / "cache")
    shutil.copytree(built_cache, path)
    return path


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def shard_files(path: str) -> list[str]:
    return [os.path.join(path, shard.file) for shard in read_metadata(path, check_files=False).shards]


def all_files(path: str) -> set[str]:
    return {os.path.relpath(os.path.join(folder, name), path)
            for folder, _, names in os.walk(path) for name in names}


# --- info -------------------------------------------------------------------------------

def test_info_describes_the_cache_and_counts_classes(cache, capsys):
    write_bad_inputs(cache, read_metadata(cache).write_id, [{"input": "x.csv, line 2", "error": "bad"}])
    code, out, _ = run_cli(capsys, "info", cache)
    assert code == 0
    manifest = read_metadata(cache)
    assert f"rows         {ROWS}" in out
    assert f"shards       {manifest.num_shards} ({human_size(manifest.num_bytes)} on disk" in out
    assert manifest.num_shards > 1
    assert "compression  none" in out and f"pyarrow {pyarrow.__version__}" in out and '"source": "test"' in out
    assert "format       5, columns in Hugging Face's types" in out
    for name, feature in FEATURES.items():
        assert f"{name}  " in out and repr(feature) in out
    labels = collections.Counter(NAMES[make_example(i)["label"]] for i in range(ROWS))
    tags = collections.Counter(TAGS[t] for i in range(ROWS) for t in make_example(i)["tags"])
    label_section = out.split("label: count per class")[1].split("tags: count per class")[0]
    for name in NAMES:
        assert re.search(rf"^  {name} +{labels[name]} ", label_section, re.MULTILINE)
    tag_section = out.split("tags: count per class")[1]
    for name in TAGS:
        assert re.search(rf"^  {name} +{tags[name]} ", tag_section, re.MULTILINE)
    assert f"1 skipped, listed in {os.path.join(cache, BAD_INPUTS_NAME)}" in out


def test_class_counts_on_a_compressed_cache(tmp_path):
    path = str(tmp_path / "zstd")
    write_shards((make_example(i) for i in range(ROWS)), path, FEATURES, compression="zstd", batch_size=7)
    counts = class_counts(read_metadata(path))
    assert counts["label"] == collections.Counter(make_example(i)["label"] for i in range(ROWS))
    assert counts["tags"].total() == sum(len(make_example(i)["tags"]) for i in range(ROWS))


@pytest.mark.parametrize("command", [["info"], ["verify"], ["head"], ["show", "--out", "x.png"], ["gc"]])
def test_a_path_that_is_not_a_cache_says_so(command, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for path in (str(tmp_path / "empty"), str(tmp_path / "does not exist")):
        code, out, err = run_cli(capsys, *command, path)
        assert code == 2
        assert path in err and ("not a beam_shards cache" in err or "no beam_shards cache" in err)
        assert "Traceback" not in err


def test_the_console_command_runs_as_a_process(built_cache):
    result = subprocess.run([sys.executable, "-m", "beam_shards.cli", "info", built_cache], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"rows         {ROWS}" in result.stdout
    result = subprocess.run([sys.executable, "-m", "beam_shards.cli", "info", built_cache + "-missing"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "no beam_shards cache" in result.stderr and "Traceback" not in result.stderr


# --- verify -----------------------------------------------------------------------------

def test_verify_passes_on_a_sound_cache(cache, capsys):
    code, out, err = run_cli(capsys, "verify", "--progress", cache)
    assert code == 0
    assert out.startswith(f"OK: {len(shard_files(cache))} shard(s), {ROWS} rows")
    assert "shards" in err  # the final progress line


def test_verify_fails_and_prints_every_problem(cache, capsys):
    first, second, third, *_ = shard_files(cache)
    with open(first, "r+b") as handle:
        handle.seek(os.path.getsize(first) // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with open(second, "r+b") as handle:
        handle.truncate(os.path.getsize(second) - 10)
    os.remove(third)
    code, out, _ = run_cli(capsys, "verify", cache)
    assert code == 1
    problems = [line for line in out.splitlines() if line.startswith("problem:")]
    assert any(os.path.basename(first) in p and "checksum" in p for p in problems)
    assert any(os.path.basename(second) in p and "truncated" in p for p in problems)
    assert any(os.path.basename(third) in p and "missing" in p for p in problems)
    assert "FAILED" in out


# --- head -------------------------------------------------------------------------------

def test_head_prints_decoded_rows(cache, capsys):
    code, out, _ = run_cli(capsys, "head", cache, "-n", "3")
    assert code == 0
    dataset = ShardedDataset(cache)
    for index in range(3):
        row = dataset[index]
        block = out.split(f"row {index}\n")[1].split("row ")[0]
        image = row["image"]
        assert f"image    {image.format} {image.width}x{image.height} {image.mode}," in block
        assert f"label    {row['label']} ({NAMES[row['label']]})" in block
        assert f"caption  {row['caption']!r}" in block
        assert "vec      float32[3] [" in block
    assert "row 3" not in out and f"(3 of {ROWS} rows)" in out


def test_head_with_columns(cache, capsys):
    code, out, _ = run_cli(capsys, "head", cache, "-n", "1", "--columns", "label,caption")
    assert code == 0
    assert "label" in out and "caption" in out and "image" not in out and "vec" not in out
    code, _, err = run_cli(capsys, "head", cache, "--columns", "nope")
    assert code == 2 and "nope" in err


def test_head_shows_each_value_as_its_feature_describes_it():
    assert Image().describe(jpeg(1, size=20)).startswith("JPEG 20x20 RGB, ")
    assert Image().describe(b"junk").startswith("unreadable image")
    assert Image().describe(None) == "None"
    assert Sequence(Value("int64")).describe(list(range(10))).endswith(", ... (10 items)]")
    assert Value("string").describe("x" * 200).endswith("...")


# --- show -------------------------------------------------------------------------------

def test_show_writes_a_contact_sheet(cache, tmp_path, capsys):
    out_file = tmp_path / "grid.png"
    code, out, _ = run_cli(capsys, "show", cache, "--out", str(out_file), "-n", "7", "--tile", "40")
    assert code == 0 and str(out_file) in out
    with PILImage.open(out_file) as sheet:
        assert sheet.format == "PNG"
        # 7 images: 3 across (about a square), 3 down; each cell 40 wide, 40 + caption high.
        assert sheet.size == (3 * 40, 3 * (40 + cli.CAPTION_HEIGHT))
        pixels = np.asarray(sheet.convert("RGB"))
    assert pixels[:40, :40].std() > 10  # an image, not just the background


@pytest.mark.parametrize("flag", ["--across", "--columns"])  # --columns: its old name
def test_show_clamps_to_the_rows_and_takes_a_layout(cache, tmp_path, capsys, flag):
    out_file = tmp_path / "all.png"
    code, _, _ = run_cli(capsys, "show", cache, "--out", str(out_file), "-n", "500", "--tile", "16", flag, "10")
    assert code == 0
    with PILImage.open(out_file) as sheet:
        assert sheet.size == (10 * 16, -(-ROWS // 10) * (16 + cli.CAPTION_HEIGHT))


def test_show_without_images_is_a_usage_error(tmp_path, capsys):
    path = str(tmp_path / "numbers")
    write_shards(({"x": i} for i in range(3)), path, Features({"x": Value("int64")}))
    code, _, err = run_cli(capsys, "show", path, "--out", str(tmp_path / "g.png"))
    assert code == 2 and "no Image column" in err


# --- gc ---------------------------------------------------------------------------------

def add_leftovers(path: str) -> set[str]:
    """Files a killed write would leave, in beam_shards' layout; returns their relative paths."""
    killed = new_write_id()
    attempt = "0" * 32
    staged = os.path.join(path, "_staging", killed, attempt)
    os.makedirs(staged)
    os.makedirs(os.path.join(path, "_staging", killed, "1" * 32))
    shutil.copy(shard_files(path)[0], os.path.join(staged, "part-00000.arrow"))
    names = {
        f"_staging/{killed}/{attempt}/part-00000.arrow",
        f"{MANIFEST_NAME}.{killed}.0000abcd.tmp",
        f"shard-{killed}-00000-of-00002.arrow",
        f"{BAD_INPUTS_NAME}.{killed}.0000abcd.tmp",
    }
    for name in names - {f"_staging/{killed}/{attempt}/part-00000.arrow"}:
        with open(os.path.join(path, name), "wb") as handle:
            handle.write(b"left behind")
    return names


def test_gc_removes_only_leftovers(cache, capsys):
    write_bad_inputs(cache, read_metadata(cache).write_id, [{"input": "a", "error": "b"}])
    os.makedirs(os.path.join(cache, "_staging"))
    for keeper in (LOCK_NAME, "notes.txt", "shard-notes.arrow", "_staging/notes.txt", "_versions/notes.json"):
        with open(os.path.join(cache, keeper), "w") as handle:
            handle.write("keep me")
    before = all_files(cache)
    garbage = add_leftovers(cache)

    code, out, _ = run_cli(capsys, "gc", cache, "--dry-run")
    assert code == 0 and "nothing to remove" in out, "a running write's files are kept until they are old"
    code, out, _ = run_cli(capsys, "gc", cache, "--min_age", "0", "--dry-run")
    assert code == 0 and "dry run: would remove 4 file(s)" in out
    assert all(name in out for name in garbage)
    assert all_files(cache) == before | garbage

    code, out, _ = run_cli(capsys, "gc", cache, "--min_age", "0")
    assert code == 0 and "removed 4 file(s)" in out
    assert all_files(cache) == before
    assert run_cli(capsys, "verify", cache)[0] == 0
    assert len(ShardedDataset(cache)) == ROWS

    code, out, _ = run_cli(capsys, "gc", cache, "--min_age", "0")
    assert code == 0 and "nothing to remove" in out


def test_gc_cleans_a_folder_whose_only_write_was_killed(tmp_path, capsys):
    path = tmp_path / "never published"
    killed = new_write_id()
    staged = path / "_staging" / killed / ("a" * 32)
    staged.mkdir(parents=True)
    (staged / "part-00000.arrow").write_bytes(b"partial")
    (path / f"shard-{killed}-00000-of-00001.arrow").write_bytes(b"moved, never published")
    code, out, _ = run_cli(capsys, "gc", str(path), "--min_age", "0")
    assert code == 0 and "no cache is published" in out and "removed 2 file(s)" in out
    assert sorted(os.listdir(path)) in ([], [LOCK_NAME])


def test_gc_leaves_a_folder_that_is_not_a_cache_alone(tmp_path, capsys):
    path = tmp_path / "user data"
    (path / "_staging" / "mine").mkdir(parents=True)
    (path / "_staging" / "mine" / "part-00000.arrow").write_bytes(b"user file")
    (path / f"shard-{new_write_id()}-00000-of-00001.arrow").write_bytes(b"user file")
    before = all_files(str(path))
    code, _, err = run_cli(capsys, "gc", str(path), "--min_age", "0")
    assert code == 2 and "not a beam_shards cache" in err
    assert all_files(str(path)) == before


def test_gc_refuses_a_running_write_and_writes_a_damaged_pointer_again(cache, capsys):
    garbage = add_leftovers(cache)
    with open(os.path.join(cache, LOCK_NAME), "w"):
        pass
    lock = filelock.FileLock(os.path.join(cache, LOCK_NAME))
    with lock:
        code, _, err = run_cli(capsys, "gc", cache, "--min_age", "0")
    assert code == 1 and "is running" in err
    assert garbage <= all_files(cache)

    with open(os.path.join(cache, MANIFEST_NAME), "w") as handle:
        handle.write("{not json")
    code, _, err = run_cli(capsys, "info", cache)
    assert code == 1 and "not valid JSON" in err and "writes it again" in err
    code, _, err = run_cli(capsys, "gc", cache, "--min_age", "0")
    assert code == 0 and not garbage & all_files(cache), err
    assert run_cli(capsys, "verify", cache)[0] == 0


def test_human_size():
    assert [human_size(n) for n in (0, 999, 1000, 1_234_567, 3 * 10**12)] == [
        "0 B", "999 B", "1.0 kB", "1.2 MB", "3.0 TB"]


def test_version_prints_the_package_version(capsys):
    from beam_shards import __version__

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"beam-shards {__version__}"


def test_gc_takes_dry_run_spelled_with_an_underscore_and_the_old_hyphen(cache, capsys):
    for flag in ("--dry_run", "--dry-run"):
        code, out, _ = run_cli(capsys, "gc", cache, "--min_age", "0", flag)
        assert code == 0 and ("dry run" in out or "nothing to remove" in out)


def test_log_limit_lists_and_reads_only_the_newest_versions(tmp_path, capsys, monkeypatch):
    from beam_shards.format import latest

    path = str(tmp_path / "cache")
    features = Features({"x": Value("int64")})
    for i in range(6):
        write_shards([{"x": i}], path, features, mode="append")
    read = []
    real = latest.read_version
    monkeypatch.setattr(latest, "read_version", lambda p, n, *rest: read.append(n) or real(p, n, *rest))
    code, out, _ = run_cli(capsys, "log", path, "--limit", "2")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["6", "5"]
    assert read and min(read) == 5, "only the versions listed are read (and the look for a version after them)"
    code, out, _ = run_cli(capsys, "log", path)
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["6", "5", "4", "3", "2", "1"]
    with pytest.raises(SystemExit) as exit_:
        run_cli(capsys, "log", path, "--limit", "0")
    assert exit_.value.code == 2
