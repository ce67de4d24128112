"""The Apache Beam transforms: the sink, the source and their counters."""

_LAZY = {
    "BAD_INPUTS": "beam_shards.beam.counters",
    "NAMESPACE": "beam_shards.beam.counters",
    "drop_known_noise": "beam_shards.beam.noise",
    "quiet_beam": "beam_shards.beam.noise",
    "WriteToArrowShards": "beam_shards.beam.sink",
    "ReadAllFromArrowShards": "beam_shards.beam.source",
    "ReadFromArrowShards": "beam_shards.beam.source",
}


def __getattr__(name: str):
    # Importing a module of this part imports this face first: keep apache_beam out of the CLI's imports.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'beam_shards.beam' has no attribute {name!r}")


__all__ = [
    "BAD_INPUTS", "drop_known_noise", "NAMESPACE", "quiet_beam", "ReadAllFromArrowShards", "ReadFromArrowShards",
    "WriteToArrowShards",
]
