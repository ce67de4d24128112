"""Every shell and Python snippet in README and docs/ runs as written, except those that need a
cloud account or a cluster: in a folder holding the inputs they name, in the docs' order
(README first, then docs/ by name).

Placeholders are filled in as a reader would: `PATH` is a cache, `BUCKET` and the S3
endpoint are the test's S3 server's, `/mnt/nvme/shard_cache` is a folder of the test's.
A Python fragment that uses names an earlier block defines (`examples`, `rank`...) gets
them from a prelude here; a new fragment with names of its own fails until it has one.

Off the object store, a plain `python -m pipelines.NAME ...`, `python SCRIPT.py ...` or
`beam-shards ...` command runs in this process, as the command would run it
(`pipelines.shell.main`, the script as `__main__`, `cli.main`) in the snippet's folder and
environment, and so does a Python snippet that starts no worker processes: that saves an
interpreter and the imports of Beam, torch or datasets per snippet. A snippet whose DataLoader
forks workers runs as a process (this process has threads of its own that a fork would copy
mid-step). The commands run as processes in the S3 test here, in test_readme, and in the
tests of each command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_shards import ClassLabel, Features, Image, ShardedDataset, Value, cli, read_metadata
from pipelines import shell

from _support import jpeg, png
from test_readme import commands, docs
from test_tfrecord import make_tfds_folder, row, write as write_tfrecord

pytestmark = pytest.mark.slow

# What a snippet names that only a cloud account or a cluster provides.
ELSEWHERE = ("gs://", "DataflowRunner", "FlinkRunner")
# Covered elsewhere: the two commands README starts with (CI runs them, test_readme runs the
# job), installs of extras and the test loops (this suite).
COVERED = ("pip install", "-m pytest")
TIMEOUT = 600

PRELUDES = {
    # The fragment that shows on_bad="skip" continues the guide's my_pipeline.py.
    'on_bad="skip"': """
        import argparse
        import apache_beam as beam
        from apache_beam.options.pipeline_options import PipelineOptions
        from beam_shards import WriteToArrowShards
        from my_pipeline import FEATURES

        args = argparse.Namespace(output="./skip_cache")
        good = {"image": "img0.jpg", "label": "cat", "embedding": [0.0] * 4, "caption": "fine"}
        bad = dict(good, label="horse")
        with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
            examples = p | beam.Create([("img0.jpg", good), ("img1.jpg", bad)])
            {snippet}
        from beam_shards import ShardedDataset
        assert len(ShardedDataset("./skip_cache")) == 1
        """,
    # The training loop's names are the user's own.
    "ShardedDataLoader": """
        rank, world_size, checkpoint, epochs = 0, 1, {}, 1
        {snippet}
        assert "loader" in checkpoint
        """,
    "s3://": """
        from beam_shards import ShardedDataset
        {snippet}
        assert ds[0] is not None and os.listdir("{cache_dir}")  # the shard is on local disk now
        """,
}


@dataclasses.dataclass(frozen=True)
class Snippet:
    doc: str
    block: int
    language: str
    text: str

    def __str__(self) -> str:
        return f"{self.doc} block {self.block} ({self.language}): {self.text.splitlines()[0][:60]}"

    @property
    def elsewhere(self) -> bool:
        return any(mark in self.text for mark in ELSEWHERE)

    @property
    def on_s3(self) -> bool:
        return "s3://" in self.text


def snippets() -> list[Snippet]:
    """Each shell command (continuations joined) and each Python block of every doc, in order."""
    found = []
    for doc, text in docs():
        for number, match in enumerate(re.finditer(r"^```([a-z]*)\n(.*?)^```", text, re.MULTILINE | re.DOTALL)):
            language, body = match.groups()
            if language == "sh":
                found += [Snippet(doc, number, "sh", command) for command in commands(body)]
            elif language == "python":
                found.append(Snippet(doc, number, "python", body))
    return found


def _runnable(on_s3: bool) -> list[Snippet]:
    return [s for s in snippets() if not s.elsewhere and s.on_s3 == on_s3 and not any(c in s.text for c in COVERED)
            and not s.text.startswith("# my_pipeline.py")]


def test_every_readme_snippet_is_run_or_needs_a_cloud_account():
    """Nothing is left out by accident: a snippet runs here, or names a cloud store or a cluster."""
    left_out = [s for s in snippets() if s not in _runnable(False) + _runnable(True)]
    for snippet in left_out:
        assert (snippet.elsewhere or any(c in snippet.text for c in COVERED)
                or snippet.text.startswith("# my_pipeline.py")), snippet
    assert len(_runnable(False)) >= 20 and len(_runnable(True)) == 3


def _workspace(root) -> None:
    """The inputs the docs' snippets name, under `root`."""
    from pipelines import demo

    demo.run(["--output", str(root / "demo_cache"), "--num_examples", "40", "--image_size", "16", "--progress", "0"])
    for i, label in enumerate(["cat", "dog"] * 3):
        folder = root / "imagenet" / "train" / label
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i}.jpg").write_bytes(jpeg(i))
    (root / "imagenet" / "val" / "dog").mkdir(parents=True)  # a split lacking a class
    (root / "imagenet" / "val" / "dog" / "0.jpg").write_bytes(jpeg(9))
    data = root / "data"
    (data / "img").mkdir(parents=True)
    for i in range(6):
        (data / "img" / f"{i}.png").write_bytes(png(i))
    with open(data / "train.jsonl", "w") as handle:
        for i in range(6):
            handle.write(json.dumps({"image": f"img/{i}.png", "label": ["cat", "dog"][i % 2]}) + "\n")
    with open(data / "chat.jsonl", "w") as handle:
        for i in range(4):
            handle.write(json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                                                  {"role": "assistant", "content": f"a{i}"}]}) + "\n")
    datasets.Dataset.from_dict({"text": ["a", "b"], "n": [1, 2]}).save_to_disk(str(root / "saved" / "train"))
    for part in range(2):
        (data / f"part-{part}.csv").write_text("image,label,caption\n" + "".join(
            f"img/{i}.png,{['cat', 'dog'][i % 2]},caption {i}\n" for i in range(part * 3, part * 3 + 3)))
    features = Features({"image": Image(), "label": ClassLabel(names=["cat", "dog"]), "caption": Value("string")})
    (root / "features.json").write_text(json.dumps(features.to_dict()))
    (root / "cifar10").mkdir()
    for part in range(2):
        pq.write_table(pa.table({"img": pa.array([png(i) for i in range(4)], pa.binary()),
                                 "label": pa.array([i % 2 for i in range(4)], pa.int64())}),
                       root / "cifar10" / f"train-{part:05d}-of-00002.parquet")
    for part in range(2):
        write_tfrecord(data / f"train-{part:05d}.tfrecord", [row(i) for i in range(part * 4, part * 4 + 4)])
    make_tfds_folder(root / "tensorflow_datasets", "cifar10", "3.0.2")
    [pipeline] = [s.text for s in snippets() if s.text.startswith("# my_pipeline.py")]
    (root / "my_pipeline.py").write_text(pipeline)
    (root / "img0.jpg").write_bytes(jpeg(0))
    (root / "img1.jpg").write_bytes(jpeg(1))
    (root / "labels.tsv").write_text("".join(f"img{i % 2}.jpg\t{['cat', 'dog'][i % 2]}\tcaption {i}\n"
                                             for i in range(1500)))
    _checkout(root)


def _checkout(root) -> None:
    """The docs' commands run from a checkout holding .venv."""
    os.symlink(sys.prefix, root / ".venv")


# A command with nothing for the shell to do but split words, unquote and expand a leading ~.
_IN_PROCESS = re.compile(r"(python -m pipelines\.\w+|python \w+\.py|(\.venv/bin/)?beam-shards)"
                         r"( +([^\s|&;<>$`()*?'\"#]|'[^']*')+)* *(#.*)?")


def _run_in_process(text: str, cwd, env: dict[str, str]) -> None:
    """`text`, a command `_IN_PROCESS` matches, run in this process in `cwd` with `env`."""
    words = shlex.split(text, comments=True)
    with _in(cwd, env) as patch:
        argv = [os.path.expanduser(word) for word in words]  # `~` is the snippet's HOME
        if words[0] == "python" and words[1] == "-m":
            code = shell.main(importlib.import_module(words[2]).run, argv[3:])
        elif words[0] == "python":
            patch.setattr(sys, "argv", argv[1:])
            runpy.run_path(str(cwd / words[1]), run_name="__main__")
            code = 0
        else:
            code = cli.main(argv[1:])
    assert code == 0, f"{text}: exit status {code}"


def _exec_in_process(source: str, cwd, env: dict[str, str]) -> None:
    """A Python snippet's `source`, run in this process as `python snippet.py` would run it in `cwd` with `env`."""
    with _in(cwd, env) as patch:
        patch.setattr(sys, "argv", ["snippet.py"])
        exec(compile(source, str(cwd / "snippet.py"), "exec"), {"__name__": "__main__"})


@contextlib.contextmanager
def _in(cwd, env: dict[str, str]) -> Iterator[pytest.MonkeyPatch]:
    """This process in `cwd` with `env`, `cwd` first on the import path; what it imports from `cwd` is
    forgotten after."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        for name, value in env.items():
            patch.setenv(name, value)
        patch.syspath_prepend(str(cwd))
        try:
            yield patch
        finally:
            for name in [name for name, module in sys.modules.items()
                         if str(getattr(module, "__file__", None) or "").startswith(str(cwd))]:
                del sys.modules[name]


def _run(snippet: Snippet, cwd, env: dict[str, str], substitutions: dict[str, str], in_process: bool = False) -> None:
    text = snippet.text
    for old, new in substitutions.items():
        text = text.replace(old, new)
    if in_process and snippet.language == "sh" and _IN_PROCESS.fullmatch(text):
        _run_in_process(text, cwd, env)
        return
    if snippet.language == "sh":
        argv = ["bash", "-c", text]
    else:
        prelude = next((body for mark, body in PRELUDES.items() if mark in text), "{snippet}")
        indent = re.search(r"^( *)\{snippet\}", textwrap.dedent(prelude), re.MULTILINE).group(1)
        source = (textwrap.dedent(prelude).replace(indent + "{snippet}", textwrap.indent(text, indent))
                  .replace("{cache_dir}", substitutions.get("/mnt/nvme/shard_cache", "")))
        if in_process and "num_workers" not in text:
            _exec_in_process("import os\n" + source, cwd, env)
            return
        (cwd / "snippet.py").write_text("import os\n" + source)
        argv = [sys.executable, "snippet.py"]
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, f"{snippet}\n{text}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"


def _env(root, **extra: str) -> dict[str, str]:
    return {**os.environ, "PATH": f"{sys.prefix}/bin:{os.environ['PATH']}", "HOME": str(root),
            "PYTHONPATH": str(root), **extra}


def test_readme_snippets_run_as_written(tmp_path):
    _workspace(tmp_path)
    substitutions = {" PATH ": " ./demo_cache "}
    for snippet in _runnable(on_s3=False):
        _run(snippet, tmp_path, _env(tmp_path), substitutions, in_process=True)
    # What the snippets wrote is what the docs say they write.
    assert read_metadata(str(tmp_path / "caches" / "imagenet-train")).num_rows == 6
    assert [row["label"] for row in ShardedDataset(str(tmp_path / "caches" / "imagenet-val"))] == [1]
    assert ShardedDataset(str(tmp_path / "caches" / "chat"))[3]["messages"][1] == {"role": "assistant", "content": "a3"}
    assert [row["n"] for row in ShardedDataset(str(tmp_path / "caches" / "saved-train"))] == [1, 2]
    assert len(ShardedDataset(str(tmp_path / "cache"))) == 1500
    assert len(ShardedDataset(str(tmp_path / "my_cache"))) == 6
    assert (tmp_path / "grid.png").exists()


def test_readme_s3_snippets_run_against_an_s3_server(tmp_path, s3_server):
    from _stores import BUCKET, STORE_VARIABLES

    _checkout(tmp_path)  # the object-store snippets name no local input
    env = {name: value for name, value in _env(tmp_path, **s3_server.env()).items()
           if name not in STORE_VARIABLES or name in s3_server.env()}
    prefix = f"{BUCKET}/readme-{os.getpid()}"
    substitutions = {"http://127.0.0.1:9000": s3_server.endpoint, "BUCKET": prefix,
                     "/mnt/nvme/shard_cache": str(tmp_path / "shard_cache")}
    for snippet in _runnable(on_s3=True):
        _run(snippet, tmp_path, env, substitutions)
