"""Fuzzing the stored keys of a deterministic write (`beam.keys`): every plain key round-trips, and
keys' bytes sort as the keys do; any bytes read back as a stored key give a key or one clear error,
never a crash or a hang."""

from __future__ import annotations

import collections
import enum
import itertools

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from beam_shards import CorruptCacheError
from beam_shards.beam import ordered
from beam_shards.beam.keys import VERSION, decode_key, decode_keyed_row, encode_key, encode_keyed_rows
from beam_shards.beam.plain_keys import MAX_DEPTH, plain_key

from _hostile import SCALE, assert_clear

pytestmark = pytest.mark.timeout(120)
FUZZ = settings(max_examples=300 * SCALE, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# Text with every code point, lone surrogates included (they round-trip too).
TEXT = st.text(st.characters(exclude_categories=()), max_size=20)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-2**200, 2**200),
                    st.floats(allow_nan=False, allow_infinity=True), TEXT, st.binary(max_size=20))
KEYS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=20)


def _same(a, b) -> bool:
    """Equal and of the same types all the way down (-0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b and (type(a) is not float or str(a) == str(b))


@FUZZ
@given(key=KEYS)
def test_every_plain_key_round_trips_exactly(key):
    data = encode_key(key)
    assert _same(decode_key(data), key)
    assert encode_key(decode_key(data)) == data
    [row_key] = encode_keyed_rows(key, 1)
    decoded, row = decode_keyed_row(row_key)
    assert _same(decoded, key) and row == 0


# Keys of one shape sort together, as a pipeline's do: (file, position, name) and nested variants.
SHAPES = [
    st.tuples(TEXT, st.integers(), TEXT),
    st.tuples(st.binary(max_size=4), st.floats(allow_nan=False), st.tuples(st.integers(), st.booleans())),
    st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans()),
    # numbers Python holds equal though of other types (1, 1.0, True; 0.0, -0.0), then what tells the keys apart
    st.tuples(st.one_of(st.integers(-2, 2), st.sampled_from([-1.0, -0.0, 0.0, 1.0, 1.5]), st.booleans()),
              st.one_of(st.integers(-2, 2), st.floats(-2, 2), st.booleans()), TEXT),
]


@FUZZ
@given(data=st.data(), shape=st.sampled_from(SHAPES))
def test_stored_keys_sort_by_their_bytes_as_the_keys_do(data, shape):
    keys = data.draw(st.lists(shape, max_size=30))
    stored = [encode_key(key) for key in keys]
    for a, b in itertools.combinations(range(len(keys)), 2):
        if keys[a] < keys[b]:
            assert stored[a] < stored[b], (keys[a], keys[b])
        elif keys[b] < keys[a]:
            assert stored[b] < stored[a], (keys[b], keys[a])
        else:  # equal keys: equal bytes when of the same types, else in an order of their types
            assert (stored[a] == stored[b]) == _same(keys[a], keys[b]), (keys[a], keys[b])
    if not any(keys[a] == keys[b] and not _same(keys[a], keys[b]) for a, b in itertools.combinations(range(len(keys)), 2)):
        stored_pairs = [row for key in keys for row in encode_keyed_rows(key, 3)]
        pairs = [(key, row) for key in keys for row in range(3)]
        assert [pairs[i] for i in sorted(range(len(pairs)), key=stored_pairs.__getitem__)] == sorted(pairs)


def test_a_nan_key_is_refused_by_name():
    with pytest.raises(TypeError, match=r"the key \('a.csv', nan\) holds a NaN at key\[1\], which does not sort"):
        plain_key(("a.csv", float("nan")))


class Colour(enum.IntEnum):
    RED = 1


Where = collections.namedtuple("Where", "source position name")


def test_subclasses_of_plain_types_are_stored_as_their_base_type():
    key = (Where("a.csv", 7, "a.csv, line 7"), Colour.RED, True)
    assert _same(decode_key(encode_key(key)), (("a.csv", 7, "a.csv, line 7"), 1, True))
    assert plain_key(key) == key


def _nested(depth: int):
    key = "leaf"
    for _ in range(depth):
        key = (key,)
    return key


def test_keys_nest_at_most_max_depth_levels():
    assert decode_key(encode_key(_nested(MAX_DEPTH))) == _nested(MAX_DEPTH)
    assert decode_keyed_row(encode_keyed_rows(_nested(MAX_DEPTH), 1)[0])[0] == _nested(MAX_DEPTH)
    with pytest.raises(TypeError, match=f"deeper than {MAX_DEPTH} levels"):
        encode_key(_nested(MAX_DEPTH + 1))
    forged = bytes([VERSION]) + b"\x40" * (MAX_DEPTH + 1) + b"\x02" + b"\x00" * (MAX_DEPTH + 1)
    with pytest.raises(ValueError, match=f"deeper than {MAX_DEPTH} levels"):
        decode_key(forged)


def _decodes_or_refuses(data: bytes) -> None:
    for decode in (decode_key, decode_keyed_row):
        try:
            decode(data)
        except ValueError as error:
            assert_clear(error, ValueError, ["stored"])


@FUZZ
@given(data=st.binary(max_size=64))
def test_random_bytes_as_a_stored_key_decode_or_give_one_clear_error(data):
    _decodes_or_refuses(data)
    _decodes_or_refuses(bytes([VERSION]) + data)


@FUZZ
@given(key=KEYS, data=st.data())
def test_a_damaged_stored_key_decodes_or_gives_one_clear_error(key, data):
    stored = bytearray(encode_keyed_rows(key, 1)[0])
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(stored)))
        edit = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if edit == "flip" and at < len(stored):
            stored[at] ^= data.draw(st.integers(1, 255))
        elif edit == "cut":
            del stored[at:]
        else:
            stored[at:at] = data.draw(st.binary(min_size=1, max_size=9))
    _decodes_or_refuses(bytes(stored))


@FUZZ
@given(column=st.lists(st.one_of(st.binary(max_size=24), KEYS.map(lambda k: encode_keyed_rows(k, 1)[0])),
                       min_size=1, max_size=8))
def test_a_chunk_of_hostile_stored_keys_is_sorted_or_refused_clearly(column):
    table = pa.table({"v": list(range(len(column))), ordered.KEY_COLUMN: pa.array(column, pa.large_binary())})
    try:
        ordered_keys = ordered.in_key_order(table).column(ordered.KEY_COLUMN).to_pylist()
    except CorruptCacheError as error:
        assert_clear(error, CorruptCacheError, ["holds no key a deterministic write stores"])
        return
    assert ordered_keys == sorted(column)  # by their bytes, which for stored keys is the keys' order


def test_claimed_lengths_past_the_end_and_numbers_out_of_form_are_refused():
    version = bytes([VERSION])
    for forged, words in [(version + b"\x14\xff\xff\x01", "wanted"),  # an integer part of 65,535 bytes
                          (version + b"\x20abc", "ends inside escaped bytes"),
                          (version + b"\x30a\x00\x01", "after an escape"),
                          (version + b"\x14\x00\x02\x00\x01\x00\x00\x00", "not in the one form"),  # a leading 0
                          (version + b"\x14\x00\x00\x80\x00\x00\x00", "not in the one form"),  # 0.5 as an int
                          (version + b"\x14\x00\x00\x80\x00\xff\x00\x00\x02", "not in the one form"),  # a last 0
                          (version + b"\x14\x00\x00" + b"\x01" * 136 + b"\x00\x00\x02", "more fraction digits"),
                          (version + b"\x14\xff\xff" + b"\x01" * 0xFFFF + b"\x00\x00\x02", "out of range"),
                          (version + b"\x14\x00\x01\x02\x00\x00\x01", "not in the one form"),  # bool 2
                          (version + b"\x15\x00", "not in the one form"),  # an int infinity
                          (version + b"\x13\x07", "unknown number kind"),
                          (version + b"\x13", "1 numbers have 0 kind bytes"),
                          (version + b"\x13\x00\x00", "1 numbers have 2 kind bytes")]:
        with pytest.raises(ValueError, match=words):
            decode_key(forged)


def test_keys_that_tie_in_one_place_still_sort_by_the_places_after_it():
    keys = [(1.0, "a"), (1, "b"), (True, "c"), (-0.0, "a"), (0.0, "b"), (0, "c"), (False, "a")]
    assert sorted(keys, key=encode_key) == sorted(keys)  # Python's stable sort keeps the ties as given
    for key in keys:
        assert _same(decode_key(encode_key(key)), key)


def test_a_key_holding_an_int_too_long_to_print_is_refused_clearly():
    with pytest.raises(TypeError, match="holding an int too long to print"):
        plain_key((2**20000, [1]))
    with pytest.raises(TypeError, match="an int of more than 65,535 bytes"):
        plain_key(2**(8 * 65536))
