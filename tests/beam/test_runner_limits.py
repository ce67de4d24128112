"""WriteToArrowShards refuses a runner that drops what `finish_bundle` emits (Beam's DaskRunner),
and a write of no rows unless `allow_empty=True`."""

from __future__ import annotations

import os
import types

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineRunner

from beam_shards import EmptyWriteError, Features, Value, WriteToArrowShards, read_metadata, write_shards
from beam_shards.beam import bundles
from beam_shards.beam.runner_limits import unsupported_runner

from _support import options

pytestmark = pytest.mark.timeout(120)

FEATURES = Features({"id": Value("int64")})
DASK_MODULE = "apache_beam.runners.dask.dask_runner"


def _runner_class(name: str, module: str, base: type = PipelineRunner) -> type:
    """A runner class named as Beam's would be; Beam's own needs dask installed to import."""
    return type(name, (base,), {"__module__": module})


@pytest.mark.parametrize("runner", [
    _runner_class("DaskRunner", DASK_MODULE),
    _runner_class("MyRunner", "my_runners", _runner_class("DaskRunner", DASK_MODULE)),
], ids=["Beam's DaskRunner", "a subclass of it"])
def test_the_dask_runner_is_refused_when_the_sink_is_applied(tmp_path, runner):
    pipeline = beam.Pipeline(runner=runner(), options=PipelineOptions([]))
    with pytest.raises(ValueError, match="DaskRunner collects a DoFn's outputs before finish_bundle") as raised:
        _ = pipeline | beam.Create([{"id": 1}]) | WriteToArrowShards(str(tmp_path / "cache"), FEATURES)
    assert "publish no rows" in str(raised.value) and "use another runner" in str(raised.value)


@pytest.mark.parametrize("flag", ["DaskRunner", "dask", "daskrunner", f"{DASK_MODULE}.DaskRunner"])
def test_a_runner_option_naming_dask_is_refused(flag):
    pipeline = types.SimpleNamespace(runner=None, options=PipelineOptions([f"--runner={flag}"]))
    assert "DaskRunner" in unsupported_runner(pipeline)


@pytest.mark.parametrize("runner", ["FnApiRunner", "BundleBasedDirectRunner", "DirectRunner"])
def test_other_runners_are_not_refused(runner):
    assert unsupported_runner(beam.Pipeline(options=options(f"--runner={runner}"))) is None
    lookalike = _runner_class("DaskRunner", "somewhere_else")
    assert unsupported_runner(beam.Pipeline(runner=lookalike(), options=PipelineOptions([]))) is None


def _previous(path: str) -> None:
    write_shards(({"id": i} for i in range(5)), path, FEATURES)


@pytest.mark.parametrize("deterministic", [False, True], ids=["bundles", "deterministic"])
def test_a_write_of_no_rows_is_refused_by_default_and_keeps_the_previous_cache(tmp_path, deterministic):
    path = str(tmp_path / "cache")
    _previous(path)
    with pytest.raises(EmptyWriteError, match="holds no rows; nothing was published"):
        with beam.Pipeline(options=options()) as p:
            _ = p | beam.Create([]) | WriteToArrowShards(path, FEATURES, deterministic=deterministic)
    assert read_metadata(path).num_rows == 5


def test_allow_empty_publishes_a_version_of_no_rows(tmp_path):
    path = str(tmp_path / "cache")
    _previous(path)
    with beam.Pipeline(options=options()) as p:
        _ = p | beam.Create([]) | WriteToArrowShards(path, FEATURES, allow_empty=True, deterministic=True)
    assert read_metadata(path).num_rows == 0 and read_metadata(path).version == 2


def test_every_row_skipped_is_a_write_of_no_rows(tmp_path):
    path = str(tmp_path / "cache")
    with pytest.raises(EmptyWriteError):
        with beam.Pipeline(options=options()) as p:
            _ = p | beam.Create([{"id": "bad"}] * 3) | WriteToArrowShards(path, FEATURES, on_bad="skip")
    assert not os.path.exists(os.path.join(path, "_metadata.json"))


def test_a_runner_that_loses_finish_bundles_outputs_publishes_nothing(tmp_path, monkeypatch):
    """What Beam's DaskRunner does to the sink, on a runner here: the shards are staged, never listed."""
    path = str(tmp_path / "cache")
    _previous(path)
    lost = []
    real = bundles.WriteBundleFn.finish_bundle

    def losing(self):
        lost.extend(real(self) or ())
        return iter(())

    monkeypatch.setattr(bundles.WriteBundleFn, "finish_bundle", losing)
    with pytest.raises(EmptyWriteError):
        with beam.Pipeline(options=options()) as p:
            _ = p | beam.Create([{"id": i} for i in range(50)]) | WriteToArrowShards(path, FEATURES)
    assert lost, "finish_bundle's outputs must have been dropped"
    assert read_metadata(path).num_rows == 5
