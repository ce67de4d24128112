"""`beam-shards`: look at, check and clean a cache from the shell."""

from beam_shards.beam.noise import drop_known_noise
from beam_shards.cli.commands import add_command, main

drop_known_noise()

__all__ = ["add_command", "main"]
