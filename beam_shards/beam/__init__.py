"""The Apache Beam transforms: the sink, the source and their counters; and the sink's deterministic
write run in one process, without Beam (`write_in_process`)."""

from beam_shards.lazy import lazy_names

_LAZY = {
    "BAD_INPUTS": "beam_shards.beam.counters",
    "CheckFeatures": "beam_shards.beam.deferred",
    "NAMESPACE": "beam_shards.beam.counters",
    "drop_known_noise": "beam_shards.beam.noise",
    "quiet_beam": "beam_shards.beam.noise",
    "WriteToArrowShards": "beam_shards.beam.sink",
    "ReadAllFromArrowShards": "beam_shards.beam.source",
    "ReadFromArrowShards": "beam_shards.beam.source",
    "write_in_process": "beam_shards.beam.ordered_in_process",
    "WrittenInProcess": "beam_shards.beam.ordered_in_process",
}

# Importing a module of this part imports this face first: keep apache_beam out of the CLI's imports.
__getattr__ = lazy_names(__name__, _LAZY)

__all__ = [
    "BAD_INPUTS", "CheckFeatures", "drop_known_noise", "NAMESPACE", "quiet_beam", "ReadAllFromArrowShards",
    "ReadFromArrowShards", "WriteToArrowShards", "write_in_process", "WrittenInProcess",
]
