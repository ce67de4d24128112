"""`python -m pipelines.NAME` before the pipeline module's imports: its flags are read first.

Importing Beam and the pipelines takes seconds; `--help`, a missing flag or a malformed
value need none of it. A pipeline module whose parser builds without Beam calls `launch`
(`index_file_entry` for csv and jsonl) when run as `__main__`, before its other imports:
the parser answers those alone, and only a command line it takes goes on to import the
module by its name and run it (`shell.run_script`).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable

from pipelines.flags import index_file_parser


def index_file_entry(name: str, description: str, example_file: str, *, text: bool = False,
                     script: bool = False) -> Callable[[], argparse.ArgumentParser]:
    """The parser builder of the index-file pipeline `pipelines.NAME` (`flags.index_file_parser`);
    with `script` (the module runs as `__main__`), `launch`es it first, which does not return."""
    build_parser = functools.partial(index_file_parser, name, description, example_file, text)
    if script:
        launch(f"pipelines.{name}", build_parser)
    return build_parser


def launch(module_name: str, build_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """Reads the process arguments with `build_parser()` (printing `--help`, or a usage error, and
    exiting), then runs the module `module_name` as `shell.run_script` does, and exits."""
    build_parser().parse_known_args()
    from pipelines.shell import run_script

    run_script(module_name)
