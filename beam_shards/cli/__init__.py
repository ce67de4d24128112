"""`beam-shards`: look at, check and clean a cache from the shell."""

from beam_shards.beam.noise import drop_known_noise
from beam_shards.lazy import lazy_names

_LAZY = {
    "add_command": "beam_shards.cli.commands",
    "main": "beam_shards.cli.commands",
}

__getattr__ = lazy_names(__name__, _LAZY)

drop_known_noise()

__all__ = ["add_command", "main"]
