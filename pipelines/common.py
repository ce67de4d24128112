"""What every conversion pipeline shares, named in one place; each job lives in its own module.

- `flags`: the flags every pipeline takes (`make_parser`, `parse_args`: every flag a
  pipeline does not know goes to Beam's `PipelineOptions`) and the inputs they name
  (`input_files`, `input_uri`, `load_features`).
- `inference`: the features to convert with, given (`--features`) or inferred.
- `classes`: the classes a ClassLabel is pinned to (`--classes`, `--classes_from`, an
  append's cache), so class ids stay the same across splits and versions.
- `bad_inputs`: `Malformed`, which a reader yields for an input it cannot parse, and
  `BadInputError`, which such an input raises without `--skip_bad`.
- `write`: `write_cache`, which checks `(where, example)` pairs (an example may be `Rows`
  of several) and hands them to the sink.
- `running`: `Conversion`, what a pipeline plans from its flags, `run_conversion`,
  `run_conversions` (several in one Beam job), and `main`/`run_script` for the command line.
- `report`: what a pipeline prints once its cache is published.

A pipeline module builds an argument parser with `make_parser`, reads its flags with
`parse_args`, and plans a `Conversion` (`plan(argv)`; `run(argv)` runs it) whose `read`
turns its input into `(where, example)` pairs. `where`, a `Where`, is the example's key: rows are written in
its order (input file, then position), and every error names the input by it
("data.csv, line 7").
"""

from pipelines.bad_inputs import BadInputError, Malformed
from pipelines.flags import IMAGE_EXTENSIONS, input_files, input_uri, load_features, make_parser, parse_args
from pipelines.inference import class_label_of_values, given_features, infer_from_rows, inferring
from pipelines.report import report
from pipelines.running import Conversion, main, run_conversion, run_conversions, run_script
from pipelines.write import Rows, write_cache

__all__ = [
    "BadInputError", "Conversion", "IMAGE_EXTENSIONS", "Malformed", "Rows", "class_label_of_values", "given_features",
    "infer_from_rows", "inferring", "input_files", "input_uri", "load_features", "main", "make_parser", "parse_args",
    "report", "run_conversion", "run_conversions", "run_script", "write_cache",
]
