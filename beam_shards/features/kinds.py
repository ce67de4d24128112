"""Every feature kind, loaded: `feature_from_dict` and `feature_kinds` from here see all of them.

A kind registers itself (`@kind`) when its module is imported, and the package's face imports
nothing until asked, so whatever reads a kind's JSON form takes these two from this module.
"""

import beam_shards.features.array  # noqa: F401  (each kind's module registers it)
import beam_shards.features.files  # noqa: F401
import beam_shards.features.json_value  # noqa: F401
import beam_shards.features.sequence  # noqa: F401
import beam_shards.features.struct  # noqa: F401
import beam_shards.features.value  # noqa: F401
from beam_shards.features.base import feature_from_dict, feature_kinds

__all__ = ["feature_from_dict", "feature_kinds"]
