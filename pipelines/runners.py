"""Whether `--runner` names a runner, and whether its workers can write a local `--output`:
checked before anything runs.

A local folder is only one folder when every worker runs on this machine. Workers on
other machines (Dataflow, a Flink or Spark cluster, Docker containers) would stage
shards on their own disks, and the write would fail at publish with a confusing error.
"""

from __future__ import annotations

import difflib
import importlib
import re

from apache_beam.options.pipeline_options import (FlinkRunnerOptions, PipelineOptions, PortableOptions,
                                                  SparkRunnerOptions, StandardOptions)

from beam_shards.storage import fs

_REMOTE = ("dataflowrunner", "testdataflowrunner")
# Runners whose workers live where --environment_type says; each maps to whether it
# defaults to LOOPBACK (workers in this process) when --environment_type is not given.
_PORTABLE = {
    "flinkrunner": lambda options: options.view_as(FlinkRunnerOptions).flink_master in ("[local]", "[auto]"),
    "sparkrunner": lambda options: re.match(r"^local(\[.*\])?$", options.view_as(SparkRunnerOptions).spark_master_url)
    is not None,
    "portablerunner": lambda options: False,
}
_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def runner_name(options: PipelineOptions) -> str:
    """The runner's class name in lower case, however `--runner` spelled it (dataflow, DataflowRunner, a.b.DataflowRunner)."""
    runner = options.view_as(StandardOptions).runner
    name = (runner if isinstance(runner, str) else type(runner).__name__).rsplit(".", 1)[-1].lower()
    return name if name.endswith("runner") else name + "runner"


def unknown_runner_problem(options: PipelineOptions) -> str | None:
    """Why `--runner` names no runner Beam knows (with the nearest one), or None when it does.

    A dotted name is a runner class (a user's own, or one Beam does not name, like its
    DaskRunner), imported here to check it; so the options its module defines are known
    once this returns None.
    """
    runner = options.view_as(StandardOptions).runner
    if not isinstance(runner, str):
        return None
    if "." in runner:
        module, _, name = runner.rpartition(".")
        try:
            found = hasattr(importlib.import_module(module), name)
        except ImportError as error:
            return f"--runner {runner}: cannot import {module} ({error})"
        return None if found else f"--runner {runner}: {module} has no {name}"
    names = StandardOptions.KNOWN_RUNNER_NAMES
    if runner_name(options) in {name.lower() for name in names}:
        return None
    spellings = {spelling: name for name in names for spelling in (name.lower(), name.lower().removesuffix("runner"))}
    nearest = difflib.get_close_matches(runner.lower(), spellings, n=1, cutoff=0.6)
    hint = f"did you mean {spellings[nearest[0]]}?" if nearest else f"known runners: {', '.join(sorted(names))}"
    return f"--runner {runner} is not a Beam runner; {hint}"


def workers_on_this_machine(options: PipelineOptions) -> bool:
    """Whether every worker of the runner `options` name runs on this machine.

    Local runners (FnApiRunner, DirectRunner, PrismRunner...) do; Dataflow does not;
    Flink, Spark and portable runners do with `--environment_type=LOOPBACK` (their
    default on an embedded local cluster) or an EXTERNAL worker pool on a loopback
    address. Runners this cannot tell about are given the benefit of the doubt.
    """
    name = runner_name(options)
    if name in _REMOTE:
        return False
    if name not in _PORTABLE:
        return True
    portable = options.view_as(PortableOptions)
    environment = (portable.environment_type or "").upper()
    if not environment:
        return _PORTABLE[name](options)
    if environment == "EXTERNAL":
        host = (portable.environment_config or "").rsplit(":", 1)[0]
        return host in _LOOPBACK_HOSTS
    return environment == "LOOPBACK"


def local_output_problem(output: str, options: PipelineOptions) -> str | None:
    """Why `output` cannot be written with the runner of `options`, or None when it can."""
    if not fs.is_local(output) or workers_on_this_machine(options):
        return None
    runner = options.view_as(StandardOptions).runner
    advice = "give a location every worker reaches, like gs://BUCKET/cache or s3://BUCKET/cache"
    if runner_name(options) in _PORTABLE:
        advice += ", or run the workers in this process with --environment_type=LOOPBACK"
    return (f"--output {output} is a folder on this machine, but --runner={runner} runs its workers elsewhere, "
            f"each of which would write to its own disk; {advice}")
