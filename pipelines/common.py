"""What every conversion pipeline shares, named in one place; each job lives in its own module.

- `flags`: the flags every pipeline takes (`make_parser`, `parse_args`: every flag a
  pipeline does not know goes to Beam's `PipelineOptions`) and the inputs they name
  (`input_files`, `input_uri`, `load_features`).
- `inference`: the features to convert with, given (`--features`) or inferred.
- `classes`: the classes a ClassLabel is pinned to (`--classes`, `--classes_from`, an
  append's cache), so class ids stay the same across splits and versions.
- `bad_inputs`: `Malformed`, which a reader yields for an input it cannot parse, and
  `BadInputError`, which such an input raises without `--skip_bad`.
- `rows`: `Rows`, several examples in Arrow form in the `(where, example)` stream.
- `write`: `write_cache`, which checks `(where, example)` pairs and hands them to the sink.
- `running`: `Conversion`, what a pipeline plans from its flags, `run_conversion` and
  `run_conversions` (several in one Beam job).
- `shell`: `main`/`run_script`, the command line around a pipeline's `run`.
- `report`: what a pipeline prints once its cache is published.

A pipeline module builds an argument parser with `make_parser`, reads its flags with
`parse_args`, and plans a `Conversion` (`plan(argv)`; `run(argv)` runs it) whose `read`
turns its input into `(where, example)` pairs. `where`, a `Where`, is the example's key: rows are written in
its order (input file, then position), and every error names the input by it
("data.csv, line 7").
"""

from beam_shards.lazy import lazy_names

# Lazy, as the package's faces are: a conversion that runs without Beam (`tabular_local`) never imports it.
_LAZY = {
    "BadInputError": "pipelines.bad_inputs", "Malformed": "pipelines.bad_inputs",
    "IMAGE_EXTENSIONS": "pipelines.flags", "input_files": "pipelines.flags", "input_uri": "pipelines.flags",
    "load_features": "pipelines.flags", "make_parser": "pipelines.flags", "parse_args": "pipelines.flags",
    "class_label_of_values": "pipelines.inference", "given_features": "pipelines.inference",
    "infer_from_rows": "pipelines.inference", "inferring": "pipelines.inference",
    "report": "pipelines.report", "Rows": "pipelines.rows",
    "Conversion": "pipelines.running", "run_conversion": "pipelines.running", "run_conversions": "pipelines.running",
    "main": "pipelines.shell", "run_script": "pipelines.shell",
    "write_cache": "pipelines.write",
}
__getattr__ = lazy_names(__name__, _LAZY)

__all__ = [
    "BadInputError", "Conversion", "IMAGE_EXTENSIONS", "Malformed", "Rows", "class_label_of_values", "given_features",
    "infer_from_rows", "inferring", "input_files", "input_uri", "load_features", "main", "make_parser", "parse_args",
    "report", "run_conversion", "run_conversions", "run_script", "write_cache",
]
