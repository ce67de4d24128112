"""Features made when the pipeline runs: a PCollection of one `Features`, checked, then a side input.

`WriteToArrowShards(path, features)` takes `Features`, or a PCollection holding exactly one
(from a `beam.CombineGlobally` of per-batch summaries, say). The checks of `commit.check_write`
that need the features (`commit.check_features`) then run in a step of their own
(`CheckFeatures`); every step of the sink reads its output as a side input, so no shard is staged
before they pass. A step takes `known(features)` at construction (the features, or None when
deferred) and `side_inputs(features)` as extra arguments (none for given features, so their
steps keep Beam's faster invoker); `features_for` picks the one it has.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.pvalue import AsSingleton
from apache_beam.transforms import window

from beam_shards.display import short_repr
from beam_shards.features import Features
from beam_shards.versions.commit import check_features


def is_deferred(features: Any) -> bool:
    """Whether `features` are made when the pipeline runs (a PCollection)."""
    return isinstance(features, beam.PCollection)


def known(features: Features | beam.PCollection) -> Features | None:
    """The features a step can hold at construction: None when they are made when the pipeline runs."""
    return None if is_deferred(features) else features


def side_inputs(features: Features | beam.PCollection) -> tuple[Any, ...]:
    """The side inputs a step takes for `features`: the features, when made when the pipeline runs."""
    return (AsSingleton(features),) if is_deferred(features) else ()


def features_for(given: Features | None, side: Features | None) -> Features:
    """The features a step uses: those it was made with, else those of its side input."""
    return given if given is not None else side


class CheckFeatures(beam.PTransform):
    """Features made when the pipeline runs (a PCollection that must hold one `Features`) checked for
    a write to `path` (`commit.check_features`): a PCollection of that one element, or the pipeline
    fails.

    Raises (when the pipeline runs):
      ValueError: the PCollection holds no element or more than one (naming it).
      TypeError, FeatureError, CacheExistsError, SchemaMismatchError: as `commit.check_write`.
    """

    def __init__(self, path: str, metadata: dict[str, Any], mode: str):
        super().__init__()
        self._path = path
        self._metadata = metadata
        self._mode = mode

    def expand(self, features: beam.PCollection) -> beam.PCollection:
        name = features.producer.full_label if features.producer is not None else str(features)
        if not isinstance(features.windowing.windowfn, window.GlobalWindows):
            features = features | "GlobalWindow" >> beam.WindowInto(window.GlobalWindows())
        return (features
                | "List" >> beam.combiners.ToList()
                | "Check" >> beam.Map(_one_checked, name, self._path, self._metadata, self._mode))


def _one_checked(found: list[Any], name: str, path: str, metadata: dict[str, Any], mode: str) -> Features:
    if len(found) != 1:
        shown = f": {short_repr(found)}" if found else ""
        raise ValueError(f"WriteToArrowShards takes features as a PCollection of exactly one Features; the "
                         f"PCollection made by step {name!r} holds {len(found)} elements{shown}")
    [features] = found
    if not isinstance(features, Features):
        raise TypeError(f"features must be a Features object; the PCollection made by step {name!r} holds a "
                        f"{type(features).__name__}")
    return check_features(path, features, metadata, mode)
