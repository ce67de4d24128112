"""Suite speed: Beam's state and timer specs of a DoFn, worked out once per DoFn class.

Beam finds a DoFn's specs (`userstate.get_dofn_specs`) by reading the signature of every
method it has, and asks for them hundreds of times per pipeline, while building it and
again for every bundle: about a third of a small pipeline's run. They follow from the
DoFn's class alone (the defaults of its methods' parameters), unless the instance holds
bound methods of its own (`beam.Map(obj.method)`), which are looked at each time as Beam
does. No beam_shards DoFn declares state or timers; this changes the suite's time only.
"""

from __future__ import annotations

import types
from typing import Any


def cache_dofn_specs() -> None:
    """Makes Beam's `userstate.get_dofn_specs` compute each DoFn class's specs once."""
    from apache_beam.transforms import userstate

    compute = userstate.get_dofn_specs
    if getattr(compute, "cached_per_class", False):
        return
    known: dict[type, tuple[set, set]] = {}

    def get_dofn_specs(dofn: Any) -> tuple[set, set]:
        attributes = getattr(dofn, "__dict__", None)
        if attributes is None or any(isinstance(value, types.MethodType) for value in attributes.values()):
            return compute(dofn)
        kind = type(dofn)
        if kind not in known:
            known[kind] = compute(dofn)
        states, timers = known[kind]
        return set(states), set(timers)

    get_dofn_specs.cached_per_class = True
    get_dofn_specs.uncached = compute
    userstate.get_dofn_specs = get_dofn_specs
