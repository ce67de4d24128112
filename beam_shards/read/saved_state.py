"""The shape of a saved training state (`ShardedSampler` and `ShardedDataLoader` `state_dict()`s): checked
whole before any of it is used, so a state cut short, edited or of another kind is one clear `ValueError`
naming the key, never a KeyError or TypeError from inside the resume."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from beam_shards.display import clip, short_repr


def check_shape(state: Any, kind: str, state_format: str, keys: Sequence[str]) -> dict[str, Any]:
    """`state` when it is a dict of exactly `keys` whose "format" is `state_format`.

    Raises:
      ValueError: it is not, naming `kind` (the class whose `state_dict()` makes it) and the keys
        missing or unknown.
    """
    if not isinstance(state, dict):
        raise ValueError(f"a {kind} state is a dict from {kind}.state_dict(); got {short_repr(state)}")
    found = sorted(map(repr, state))
    if not (isinstance(state.get("format"), str) and state["format"] == state_format):
        raise ValueError(f"not a {kind} state of this version (format {clip(repr(state.get('format')))}, expected "
                         f"{state_format!r}); got keys {clip(', '.join(found), 200)}")
    missing = [key for key in keys if key not in state]
    unknown = sorted(repr(key) for key in state if key not in keys)
    if missing or unknown:
        problems = [f"lacks {', '.join(map(repr, missing))}"] * bool(missing) + [
            f"has unknown key(s) {clip(', '.join(unknown), 200)}"] * bool(unknown)
        raise ValueError(f"{kind} state {' and '.join(problems)}; a state of this version has the keys "
                         f"{', '.join(map(repr, keys))}")
    return state


def state_int(state: dict[str, Any], key: str, kind: str, low: int = 0) -> int:
    """`state[key]` as an int of at least `low`; ValueError naming `kind` and `key` otherwise."""
    value = state[key]
    if not is_int(value) or value < low:
        raise ValueError(f"{kind} state {key!r} must be an int of at least {low}; got {short_repr(value)}")
    return operator.index(value)


def same_value(saved: Any, mine: Any) -> bool:
    """Whether a state's `saved` value is `mine` (an int, bool, str or None): of its kind and equal, so that
    no value a state holds can answer `==` with an array or raise."""
    if is_int(mine):
        return is_int(saved) and operator.index(saved) == mine
    return type(saved) is type(mine) and saved == mine


def is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
