"""Malformed training states (issue 35): a loader or sampler state cut short, edited, of the wrong types or
with keys it never had is one clear ValueError naming the key, never a KeyError or TypeError from inside
the resume. The review's case: a loader state without its sampler part raised KeyError. Hypothesis edits
of states (keys deleted, set to any JSON-like value) load or give one ValueError, nothing else."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from beam_shards import ShardedSampler

from _hostile import SCALE

torch = pytest.importorskip("torch")
from beam_shards import ShardedDataLoader  # noqa: E402 (needs torch)

pytestmark = pytest.mark.timeout(60)


def loader_state() -> dict:
    """A loader's state after 2 batches of 3 over 10 samples."""
    loader = ShardedDataLoader(list(range(10)), sampler=ShardedSampler(10, seed=1), batch_size=3)
    batches = iter(loader)
    next(batches), next(batches)
    return loader.state_dict()


def without(*keys: str, part: str | None = None) -> Callable[[dict], None]:
    def edit(state: dict) -> None:
        for key in keys:
            del (state[part] if part else state)[key]
    return edit


def setting(key: str, value, part: str | None = None) -> Callable[[dict], None]:
    return lambda state: (state[part] if part else state).__setitem__(key, value)


# (name, edit of a good loader state, words the message holds); "sampler" edits the sampler part.
LOADER_CASES = [
    ("no sampler part (the review's case)", without("sampler"), ["ShardedDataLoader state lacks 'sampler'"]),
    ("no batches", without("batches"), ["lacks 'batches'"]),
    ("no format", without("format"), ["not a ShardedDataLoader state", "format None"]),
    ("nothing but the format", without("sampler", "batches"), ["lacks 'sampler', 'batches'"]),
    ("an unknown key", setting("workers", 4), ["has unknown key(s) 'workers'"]),
    ("keys not strings", setting(1, 2), ["has unknown key(s) 1"]),
    ("keys missing and unknown", lambda s: s.update(sampler_state=s.pop("sampler")),
     ["lacks 'sampler' and has unknown key(s) 'sampler_state'"]),
    ("batches a string", setting("batches", "2"), ["'batches' must be an int", "str '2'"]),
    ("batches negative", setting("batches", -1), ["'batches' must be an int of at least 0", "-1"]),
    ("batches a bool", setting("batches", True), ["'batches' must be an int"]),
    ("format an array", setting("format", np.array(["x", "y"])), ["not a ShardedDataLoader state"]),
    ("sampler part a list", setting("sampler", [1, 2]), ["'sampler': a ShardedSampler state is a dict", "list"]),
    ("sampler part None", setting("sampler", None), ["'sampler': a ShardedSampler state is a dict"]),
    ("sampler without position", without("position", part="sampler"), ["'sampler'", "lacks 'position'"]),
    ("sampler without its order", without("seed", "dataset", part="sampler"), ["lacks 'seed', 'dataset'"]),
    ("sampler with an unknown key", setting("cursor", 3, "sampler"), ["has unknown key(s) 'cursor'"]),
    ("sampler epoch a string", setting("epoch", "0", "sampler"), ["'epoch' must be an int", "str '0'"]),
    ("sampler position a float", setting("position", 2.0, "sampler"), ["'position' must be an int", "float 2.0"]),
    ("sampler world_size None", setting("world_size", None, "sampler"), ["'world_size' must be an int of at least 1"]),
    ("sampler rank a list", setting("rank", [0], "sampler"), ["'rank' must be an int"]),
    ("sampler consumed negative", setting("consumed", -5, "sampler"), ["'consumed' must be an int of at least 0"]),
    ("sampler seed an array", setting("seed", np.array([1, 1]), "sampler"), ["another order: seed array"]),
    ("sampler seed a string", setting("seed", "1", "sampler"), ["another order: seed '1' (this sampler: 1)"]),
    ("sampler shuffle 1", setting("shuffle", 1, "sampler"), ["another order: shuffle 1 (this sampler: True)"]),
    ("sampler num_samples a float", setting("num_samples", 10.0, "sampler"), ["another order: num_samples 10.0"]),
    ("sampler dataset a dict", setting("dataset", {"a": 1}, "sampler"), ["another order: dataset {'a': 1}"]),
    ("sampler format of another version", setting("format", "beam_shards.ShardedSampler/1", "sampler"),
     ["not a ShardedSampler state of this version", "ShardedSampler/1"]),
]


@pytest.mark.parametrize("edit, words", [pytest.param(e, w, id=n) for n, e, w in LOADER_CASES])
def test_a_malformed_loader_state_is_one_clear_value_error_naming_the_key(edit, words):
    state = loader_state()
    edit(state)
    loader = ShardedDataLoader(list(range(10)), sampler=ShardedSampler(10, seed=1), batch_size=3)
    with pytest.raises(ValueError) as raised:
        loader.load_state_dict(state)
    message = str(raised.value)
    assert type(raised.value) is ValueError and "\n" not in message, message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert [int(i) for batch in loader for i in batch] == list(np.random.default_rng([1, 0]).permutation(10)), \
        "a refused state moved the loader"


@pytest.mark.parametrize("state", [None, 3, "state", [("format", "x")], {}, {"format": 2}])
def test_what_is_not_a_state_at_all_is_refused_by_both(state):
    for load in (ShardedSampler(10).load_state_dict, ShardedDataLoader(list(range(10))).load_state_dict):
        with pytest.raises(ValueError, match="state"):
            load(copy.deepcopy(state))


def test_a_whole_state_still_resumes_exactly():
    """The checks refuse nothing a loader saves: the rest of the epoch follows the 2 batches consumed."""
    state = loader_state()
    loader = ShardedDataLoader(list(range(10)), sampler=ShardedSampler(10, seed=1), batch_size=3)
    loader.load_state_dict(state)
    order = np.random.default_rng([1, 0]).permutation(10).tolist()
    assert [int(i) for batch in loader for i in batch] == order[6:]


SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8)
           | st.sampled_from([0, 1, 3, 10, "beam_shards.ShardedSampler/2", "beam_shards.ShardedDataLoader/1"]))
VALUES = st.recursive(SCALARS, lambda children: st.lists(children, max_size=3)
                      | st.dictionaries(st.text(max_size=6), children, max_size=3), max_leaves=6)
KEYS = st.text(max_size=6) | st.sampled_from([
    "format", "sampler", "batches", "epoch", "offset", "position", "consumed", "world_size", "rank", "num_samples",
    "seed", "shuffle", "block_size", "drop_last", "dataset"])


@pytest.mark.timeout(300)
@settings(max_examples=200 * SCALE, deadline=None, database=None)
@given(edits=st.lists(st.tuples(st.booleans(), st.sampled_from(["delete", "set"]), KEYS, VALUES), min_size=1,
                      max_size=4))
def test_fuzzed_loader_states_load_or_give_one_value_error(edits):
    state = loader_state()
    for in_sampler, kind, key, value in edits:
        target = state["sampler"] if in_sampler and isinstance(state.get("sampler"), dict) else state
        if kind == "delete":
            target.pop(key, None)
        else:
            target[key] = value
    loader = ShardedDataLoader(list(range(10)), sampler=ShardedSampler(10, seed=1), batch_size=3)
    try:
        loader.load_state_dict(state)
    except ValueError as error:
        assert type(error) is ValueError and str(error) and "\n" not in str(error), repr(error)
        return
    rest = [int(i) for batch in loader for i in batch]
    assert len(rest) == len(set(rest)) and set(rest) <= set(range(10)), rest
