"""A runner Beam does not know by name, with options of its own: what a dotted `--runner` brings.

    python -m pipelines.jsonl ... --runner _tiny_runner.TinyRunner --tiny_marker /tmp/ran

runs on the FnApiRunner, and writes "ran" to the `--tiny_marker` file first, so a test
sees that the flag reached the runner. Like Beam's DaskRunner and its `--dask_client_address`,
its flag is known only once its module is imported.
"""

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner


class TinyOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--tiny_marker", help="a file the runner writes 'ran' to when it runs a pipeline")


class TinyRunner(FnApiRunner):
    def run_pipeline(self, pipeline, options):
        marker = options.view_as(TinyOptions).tiny_marker
        if marker:
            with open(marker, "w") as handle:
                handle.write("ran")
        return super().run_pipeline(pipeline, options)
