"""Running a pipeline on Beam: the run with its progress and its clean-up.

A pipeline module plans a `Conversion` from its flags (`plan(argv)`): its Beam options, its
steps and features, where it writes. `run_conversions` runs one or several as one Beam job,
each into `write.write_cache`, and returns each published manifest (`run_conversion` runs
one); `shell.main` turns a pipeline's `run(argv)` into what the shell sees.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_shards import EncodeError, Features, Manifest, abandon, new_write_id, read_metadata
from beam_shards.beam import quiet_beam
from beam_shards.errors import best_effort
from beam_shards.progress import Watch
from beam_shards.versions import find_published
from pipelines.bad_inputs import BadInputError
from pipelines.flags import check_dedup
from pipelines.runners import workers_on_this_machine
from pipelines.write import write_cache


Read = Callable[[beam.Pipeline], "beam.PCollection | tuple[beam.PCollection, beam.PCollection]"]


@dataclasses.dataclass(frozen=True)
class Conversion:
    """One conversion planned from a pipeline's flags, ready to run (alone or with others, `run_conversions`).

    Args:
      options: the Beam pipeline options of its flags.
      args: its parsed flags (`args.output` is where it writes).
      read: adds the steps making `(where, example)` pairs to a pipeline. For features made
        when the pipeline runs (inferred by a Beam combine, say), `features` is None and
        `read` returns `(pairs, features)`, the features a PCollection of one `Features`;
        `write_cache` and the sink read it as a side input.
      features: the features given, or None.
      metadata: what the published version records of the run (its `pipeline` names it).
      explain: called with the error a failed run raised; raises a clearer one of its own, or returns.
    """

    options: PipelineOptions
    args: argparse.Namespace
    read: Read
    features: Features | None
    metadata: dict[str, Any]
    explain: Callable[[Exception], None] = lambda error: None

    @property
    def name(self) -> str:
        return str(self.metadata.get("pipeline", "conversion"))


def run_conversion(conversion: Conversion) -> Manifest:
    """Runs `conversion`; returns the manifest published at its output."""
    (manifest,) = run_conversions([conversion])
    return manifest


def run_conversions(conversions: Sequence[Conversion]) -> list[Manifest]:
    """Runs `conversions` as one Beam job on the first's options; returns the manifest each published.

    One job costs one start of the runner (seconds on a local Flink, minutes on Dataflow)
    however many conversions it holds, and their steps run side by side. Each writes with
    a write id of its own and publishes on its own, as soon as its own steps are done. When
    the job fails, what every one of them staged is removed before the error is raised
    again: a conversion that failed, or had not published yet, leaves nothing behind but
    its output's previous cache (one that published before the failure keeps its version).
    Beam's log and what its workers print are kept out of
    the output unless an `args.verbose` (see `beam_shards.beam.noise`); when the workers run
    on this machine, a progress line is printed every `args.progress`.

    Raises:
      ValueError: no conversion, two writing to one output, or conversions with different Beam options.
    """
    if not conversions:
        raise ValueError("run_conversions takes at least one conversion; got none")
    _check_together(conversions)
    for conversion in conversions:
        if conversion.features is not None:
            check_dedup(conversion.args, conversion.features)
    options = conversions[0].options
    write_ids = [new_write_id() for _ in conversions]
    local = workers_on_this_machine(options)
    try:
        with contextlib.ExitStack() as stack:
            watches = [stack.enter_context(Watch(conversion.args.output, write_id,
                                                 interval=conversion.args.progress.total_seconds() if local else 0))
                       for conversion, write_id in zip(conversions, write_ids)]
            stack.enter_context(quiet_beam(any(conversion.args.verbose for conversion in conversions)))
            with beam.Pipeline(options=options) as pipeline:
                for conversion, write_id, watch, label in zip(conversions, write_ids, watches, _labels(conversions)):
                    _ = pipeline | label >> _Convert(conversion, write_id, watch.folder if local else None)
    except Exception as error:
        # Not on KeyboardInterrupt: a remote job may still be running and using its staging.
        for conversion, write_id in zip(conversions, write_ids):
            with best_effort(f"remove the files of failed write {write_id}", conversion.args.output):
                abandon(conversion.args.output, write_id)
        for conversion in conversions:
            conversion.explain(error)
        if isinstance(error, EncodeError):  # the sink refused an example: a bad input, as --skip_bad says
            raise BadInputError(str(error)) from None
        raise
    return [find_published(conversion.args.output, write_id) or read_metadata(conversion.args.output)
            for conversion, write_id in zip(conversions, write_ids)]


def _check_together(conversions: Sequence[Conversion]) -> None:
    outputs = [conversion.args.output for conversion in conversions]
    twice = sorted({output for output in outputs if outputs.count(output) > 1})
    if twice:
        raise ValueError(f"conversions run together write to different outputs; {twice[0]} is written twice")
    first = conversions[0].options.get_all_options(drop_default=True)
    for conversion in conversions[1:]:
        other = conversion.options.get_all_options(drop_default=True)
        if other != first:
            differ = sorted(name for name in first.keys() | other.keys() if first.get(name) != other.get(name))
            raise ValueError(f"conversions run together share their Beam options; {conversion.args.output}'s differ "
                             f"from {conversions[0].args.output}'s in {', '.join(differ)}")


def _labels(conversions: Sequence[Conversion]) -> list[str]:
    """Each conversion's step label: its pipeline's name, numbered where several share one."""
    names = [conversion.name for conversion in conversions]
    return [name if names.count(name) == 1 else f"{name} {names[:index].count(name) + 1}"
            for index, name in enumerate(names)]


class _Convert(beam.PTransform):
    """A conversion's steps: its reads into `write_cache`."""

    def __init__(self, conversion: Conversion, write_id: str, tally: str | None):
        super().__init__()
        self._conversion = conversion
        self._write_id = write_id
        self._tally = tally

    def expand(self, begin: beam.pvalue.PBegin) -> beam.PCollection:
        conversion = self._conversion
        examples, made = _with_features(conversion.read(begin.pipeline), conversion.features)
        return write_cache(examples, conversion.args, made, conversion.metadata, self._write_id, self._tally)


def _with_features(read: Any, features: Features | None) -> tuple[Any, Any]:
    """`(pairs, features)` from what `read` returned and the features given.

    Raises:
      ValueError: `read` returned features and features were given too, or what it returned as
        features is not a PCollection.
    """
    if not isinstance(read, tuple):
        return read, features
    if features is not None:
        raise ValueError("a conversion takes features given or made when the pipeline runs, not both: read "
                         "returned (pairs, features) and features were given")
    examples, made = read
    if not isinstance(made, beam.PCollection):
        raise ValueError(f"read returned (pairs, {type(made).__name__}); features made when the pipeline runs are a "
                         "PCollection of one Features")
    return examples, made
