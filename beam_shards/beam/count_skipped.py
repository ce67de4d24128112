"""The Beam combine counting what a write skipped, for `bad_limit.check_skipped`."""

from __future__ import annotations

from typing import Any

import apache_beam as beam

from beam_shards.beam.bad_limit import Skipped, first_reasons


class CountSkippedFn(beam.CombineFn):
    """Dead letters (`{"key", "reason", ...}` dicts) into a `Skipped`."""

    def create_accumulator(self) -> Skipped:
        return Skipped(0, [])

    def add_input(self, accumulator: Skipped, letter: dict[str, Any]) -> Skipped:
        first = first_reasons(accumulator.first + [(letter["key"], letter["reason"])])
        return Skipped(accumulator.count + 1, first)

    def merge_accumulators(self, accumulators: Any) -> Skipped:
        accumulators = list(accumulators)
        first = first_reasons([item for accumulator in accumulators for item in accumulator.first])
        return Skipped(sum(accumulator.count for accumulator in accumulators), first)

    def extract_output(self, accumulator: Skipped) -> Skipped:
        return accumulator
