"""Runners the sink refuses: those known to drop what a DoFn emits in `finish_bundle`.

The sink stages each bundle's shards and emits them from `finish_bundle`. Beam's
DaskRunner collects a DoFn's outputs before `finish_bundle` runs, so every staged shard
is lost and the write would publish a version of no rows. The check reads the
pipeline's runner (its class and bases, and the `--runner` option) by name, so it
needs no Dask installed.
"""

from __future__ import annotations

from typing import Any

from apache_beam.options.pipeline_options import StandardOptions

# (runner class name, the module it is defined in, the limitation)
_DROPS_FINISH_BUNDLE = {
    "DaskRunner": ("apache_beam.runners.dask.dask_runner",
                   "Beam's DaskRunner collects a DoFn's outputs before finish_bundle runs, and the sink emits "
                   "its shards from finish_bundle, so the write would publish no rows"),
}


def unsupported_runner(pipeline: Any) -> str | None:
    """Why `pipeline`'s runner cannot run the sink, or None when it can."""
    runner = getattr(pipeline, "runner", None)
    for cls in type(runner).__mro__ if runner is not None else ():
        known = _DROPS_FINISH_BUNDLE.get(cls.__name__)
        if known and cls.__module__ == known[0]:
            return known[1]
    options = getattr(pipeline, "options", None)
    named = options.view_as(StandardOptions).runner if options is not None else None
    if isinstance(named, str):  # as Beam reads it: a dotted path or a name, any case, "Runner" optional
        name = named.rsplit(".", 1)[-1].lower()
        for runner_name, (_, limitation) in _DROPS_FINISH_BUNDLE.items():
            if name in (runner_name.lower(), runner_name.lower().removesuffix("runner")):
                return limitation
    return None
