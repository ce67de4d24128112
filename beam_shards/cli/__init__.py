"""`beam-shards`: look at, check and clean a cache from the shell."""

from beam_shards.cli.commands import main

__all__ = ["main"]
