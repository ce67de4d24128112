"""The commands of README and of docs/ run as written, so the docs cannot drift from the code."""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_shards import ShardedDataset, cli, read_metadata

from _paths import REPO

TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install uv && .venv/bin/uv pip install --python .venv/bin/python -e '.[test]' && .venv/bin/python -m pytest -n auto --dist worksteal --durations=20"
VENV_PYTHON = ".venv/bin/python"


def _read(name: str) -> str:
    with open(os.path.join(REPO, name), encoding="utf-8") as handle:
        return handle.read()


def readme() -> str:
    return _read("README.md")


def docs() -> list[tuple[str, str]]:
    """(name, text) of every doc whose snippets run: README.md, then each docs/*.md by name."""
    names = ["README.md"] + sorted(f"docs/{name}" for name in os.listdir(os.path.join(REPO, "docs"))
                                   if name.endswith(".md"))
    return [(name, _read(name)) for name in names]


def doc_blocks() -> list[str]:
    """The code blocks of every doc, in `docs()` order."""
    return [block for _, text in docs() for block in code_blocks(text)]


def code_blocks(text: str) -> list[str]:
    return [match.group(1) for match in re.finditer(r"^```[a-z]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)]


def commands(block: str) -> list[str]:
    """The shell commands of a block, continuation lines joined."""
    return [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def pipeline_argv(command: str) -> tuple[str, list[str]]:
    """(module, arguments) of a `python -m pipelines.NAME ...` command (the part after the last &&)."""
    words = shlex.split(command.split("&&")[-1])
    module = words[words.index("-m") + 1]
    return module, words[words.index("-m") + 2:]


def test_readme_starts_with_the_two_commands():
    text = readme()
    first, second = code_blocks(text)[:2]
    assert text.index(first) < text.index("\n## "), "the two commands come before any section"
    assert len(commands(first)) == 1 and len(commands(second)) == 1
    assert commands(second) == [TEST_COMMAND]
    install, *_, job = commands(first)[0].split(" && ")
    assert install == "python3 -m venv .venv"
    assert commands(first)[0].split(" && ")[1] == ".venv/bin/pip install -e ."
    assert job.startswith(f"{VENV_PYTHON} -m pipelines.demo ")


def test_ci_runs_the_readme_test_command():
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if line.strip() and not line.startswith("#")]
    quiet = [line.replace(" -q ", " ") for line in lines]
    assert TEST_COMMAND in quiet


def test_readme_main_job_runs(tmp_path):
    module, argv = pipeline_argv(commands(code_blocks(readme())[0])[0])
    assert module == "pipelines.demo"
    output = str(tmp_path / "demo cache")
    argv = _with_flag(_with_flag(argv, "--output", output), "--num_examples", "40")
    result = subprocess.run([sys.executable, "-m", module, *argv], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert output in result.stdout and "beam-shards info" in result.stdout
    assert read_metadata(output).num_rows == 40
    assert len(ShardedDataset(output)) == 40


def _with_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """`argv` with `flag` set to `value`, whether it was given as `--flag value`, `--flag=value` or not at all."""
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == flag:
            skip = True
        elif not word.startswith(flag + "="):
            kept.append(word)
    return kept + [flag, value]


def test_readme_cli_commands_on_the_demo_cache(tmp_path, capsys):
    """The `beam-shards` commands the docs run on ./demo_cache work on a demo cache."""
    from pipelines import demo

    cache = str(tmp_path / "demo_cache")
    demo.run(["--output", cache, "--num_examples", "24", "--image_size", "16"])
    lines = [c for block in doc_blocks() for c in commands(block) if c.startswith(".venv/bin/beam-shards")]
    assert {shlex.split(line)[1] for line in lines} >= {"info", "show"}
    for line in lines:
        argv = [cache if word == "./demo_cache" else word for word in shlex.split(line)[1:]]
        argv = [str(tmp_path / word) if word.endswith(".png") else word for word in argv]
        assert cli.main(argv) == 0, line
    assert "label: count per class" in capsys.readouterr().out


def _readme_pipeline_commands() -> list[str]:
    return [c for block in doc_blocks() for c in commands(block)
            if re.match(r"^(\.venv/bin/)?python -m pipelines\.", c.split("&&")[-1].strip())]


@pytest.mark.parametrize("command", _readme_pipeline_commands())
def test_readme_pipeline_commands_parse(command):
    """Every pipeline command in the docs names a real module, its flags exist, and the
    rest are Beam options."""
    module, argv = pipeline_argv(command)
    parser = importlib.import_module(module).build_parser()
    _, rest = parser.parse_known_args(argv)
    options = PipelineOptions(rest)
    unknown = set(options.get_all_options(retain_unknown_options=True)) - set(options.get_all_options())
    assert not unknown, f"{command}: flags neither the pipeline nor Beam knows: {sorted(unknown)}"


def test_readme_library_pipeline_example_runs(tmp_path):
    [source] = [block for block in doc_blocks() if block.startswith("# my_pipeline.py")]
    script = tmp_path / "my_pipeline.py"
    script.write_text(source)
    from _support import jpeg

    lines = []
    for i, label in enumerate(["cat", "dog", "cat"]):
        image = tmp_path / f"img{i}.jpg"
        image.write_bytes(jpeg(i))
        lines.append(f"{image}\t{label}\ta caption {i}")
    (tmp_path / "labels.tsv").write_text("\n".join(lines) + "\n")
    [command] = [c for block in doc_blocks() for c in commands(block)
                 if c.startswith("python my_pipeline.py") and "FnApiRunner" in c]
    argv = shlex.split(command)[2:]
    argv = _with_flag(_with_flag(argv, "--input", str(tmp_path / "labels.tsv")), "--output", str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, str(script), *argv], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Manifest(" in result.stdout
    ds = ShardedDataset(str(tmp_path / "cache"), image_mode="bytes")
    rows = sorted((row["caption"], row["label"], row["image"]) for row in ds)
    assert rows == [(f"a caption {i}", [0, 1, 0][i], jpeg(i)) for i in range(3)]
