"""The keys of a deterministic write, in a plain binary encoding whose byte order is the keys'
order: a chunk's rows sort by their stored keys' bytes (Arrow's sort, no key decoded in Python),
and decoding stored bytes builds values, never runs code.

A key is what `plain_keys` allows, stored in its plain form. The encoding round-trips a key
exactly (tuples, and the base types), and two keys' bytes compare as the keys do (`<` on them),
for keys that Python orders; keys Python holds equal but of other types (1, 1.0 and True; 0.0
and -0.0), or cannot compare (None beside a str), are ordered by their types.

Format: one version byte, `VERSION`, then the key, then one byte for each of its numbers, in
order, saying what it was (`<kinds>`: 00 int, 01 bool, 02 float, 03 the float -0.0), so that
numbers Python holds equal have equal bytes where they stand and keys that differ later still
sort by what follows:

    0x02                        None
    0x11 | 0x15                 -inf | inf
    0x12 ~<magnitude>           a negative number (every byte of its magnitude inverted)
    0x13                        zero
    0x14 <magnitude>            a positive number
    0x20 <escaped> 00 00        str: UTF-8 (lone surrogates passed through)
    0x30 <escaped> 00 00        bytes
    0x40 <key>... 00            tuple

A number's magnitude is its integer part (2 bytes of length, big-endian, then its bytes
big-endian with no leading zero byte) and its fraction (the bytes of its binary digits,
with no trailing zero byte, escaped, then 00 00). Escaped: each 00 byte as 00 FF, so the end
mark 00 00 sorts before any byte that may follow, and a prefix before what it prefixes.
Anything else (an unknown tag or kind, a length past the end, a number not in this one form or
not of its kind, bytes after the kinds, a tuple nested too deep) is refused by `decode_key` with
a `ValueError` naming the offset.

A deterministic write stores each row's `(key, row of its element)` pair this way
(`encode_keyed_rows`, read back by `decode_keyed_row`).
"""

from __future__ import annotations

import math
from typing import Any

from beam_shards.beam.plain_keys import MAX_DEPTH, Key, plain_key, short_key

VERSION = 2
_NONE, _NEGATIVE_INFINITY, _NEGATIVE, _ZERO, _POSITIVE, _INFINITY = 0x02, 0x11, 0x12, 0x13, 0x14, 0x15
_STR, _BYTES, _TUPLE, _END = 0x20, 0x30, 0x40, 0x00
_INT, _BOOL, _FLOAT, _NEGATIVE_ZERO = 0, 1, 2, 3  # a number's kind
_ZEROS = {_INT: 0, _BOOL: False, _FLOAT: 0.0, _NEGATIVE_ZERO: -0.0}
# The most bytes a float's fraction takes (binary digits down to 2^-1074).
_FLOAT_FRACTION_BYTES = 135
_INVERTED = bytes(range(255, -1, -1))  # a translation table: every byte inverted
# How every stored (key, row) pair begins (the version byte, a tuple's tag) and ends (its row's kind, an int).
PAIR_HEAD, PAIR_LAST = bytes([VERSION, _TUPLE]), bytes([_INT])


def encode_key(key: Any) -> bytes:
    """The stored bytes of `key` (see the module's format).

    Raises:
      TypeError: as `plain_key`.
    """
    return key_order(plain_key(key))


def key_order(plain: Key) -> bytes:
    """`encode_key` of a key in its plain form already (`plain_key`'s, not checked again): a sort key
    that orders every pair of keys, those Python cannot compare (None beside a str) by their types."""
    out, kinds = bytearray([VERSION]), bytearray()
    _encode(plain, out, kinds)
    return bytes(out + kinds)


def encode_keyed_rows(key: Any, rows: int) -> list[bytes]:
    """The stored bytes of `(key, 0)`, `(key, 1)`, ... `(key, rows - 1)`, the key encoded once."""
    head, kinds = bytearray([VERSION, _TUPLE]), bytearray()
    _encode(plain_key(key), head, kinds)
    head, tail = bytes(head), bytes([_END, *kinds, _INT])
    return [head + _row_bytes(row) + tail for row in range(rows)]


def _row_bytes(row: int) -> bytes:
    """A row number (>= 0) as it stands in a stored pair (its kind, an int, after the key's kinds)."""
    if not row:
        return bytes([_ZERO])
    out = bytearray()
    _number(row, b"", False, out)
    return bytes(out)


def _encode(value: Key, out: bytearray, kinds: bytearray) -> None:
    """Appends `value`'s bytes to `out` and the kinds of its numbers to `kinds`."""
    kind = type(value)
    if value is None:
        out.append(_NONE)
    elif kind is bool or kind is int:
        if value:
            _number(abs(value), b"", value < 0, out)
        else:
            out.append(_ZERO)
        kinds.append(_BOOL if kind is bool else _INT)
    elif kind is float:
        if value == 0:
            out.append(_ZERO)
            kinds.append(_NEGATIVE_ZERO if math.copysign(1.0, value) < 0 else _FLOAT)
            return
        if math.isinf(value):
            out.append(_INFINITY if value > 0 else _NEGATIVE_INFINITY)
        else:
            numerator, denominator = abs(value).as_integer_ratio()  # the denominator is a power of two
            whole, rest = divmod(numerator, denominator)
            bits = denominator.bit_length() - 1
            pad = -bits % 8
            fraction = (rest << pad).to_bytes((bits + pad) // 8, "big").rstrip(b"\x00")
            _number(whole, fraction, value < 0, out)
        kinds.append(_FLOAT)
    elif kind is str:
        out.append(_STR)
        out += _escaped(value.encode("utf-8", "surrogatepass"))
    elif kind is bytes:
        out.append(_BYTES)
        out += _escaped(value)
    else:
        out.append(_TUPLE)
        for item in value:
            _encode(item, out, kinds)
        out.append(_END)


def _number(whole: int, fraction: bytes, negative: bool, out: bytearray) -> None:
    """A nonzero number: its magnitude (`whole` and the `fraction`'s bytes), inverted when negative."""
    digits = whole.to_bytes((whole.bit_length() + 7) // 8, "big")
    magnitude = len(digits).to_bytes(2, "big") + digits + _escaped(fraction)
    if negative:
        out.append(_NEGATIVE)
        out += magnitude.translate(_INVERTED)
    else:
        out.append(_POSITIVE)
        out += magnitude


def _escaped(data: bytes) -> bytes:
    return data.replace(b"\x00", b"\x00\xff") + b"\x00\x00"


def decode_key(data: bytes) -> Key:
    """The key `data` holds (as `encode_key` wrote it), in its plain form.

    Raises:
      ValueError: `data` is not one key of this encoding, naming what is wrong and at which byte.
    """
    return _decode(data, MAX_DEPTH)


def decode_keyed_row(data: bytes) -> tuple[Key, int]:
    """The `(key, row)` pair `data` holds (as `encode_keyed_rows` wrote it).

    Raises:
      ValueError: as `decode_key`, or `data` holds another value than such a pair.
    """
    pair = _decode(data, MAX_DEPTH + 1)
    if not (isinstance(pair, tuple) and len(pair) == 2 and type(pair[1]) is int and pair[1] >= 0):
        raise ValueError(f"a stored row key is a (key, row) pair; found {short_key(pair)}")
    return pair


class KeyedRowDecoder:
    """`decode_keyed_row` for a column of stored rows: a run of rows that share their key (the rows of
    one element, as `encode_keyed_rows` writes them) decodes the key once and then only each row's
    number, which must be in its one form (else the row is decoded whole, its error as `decode_keyed_row`'s)."""

    def __init__(self):
        self._prefix: bytes | None = None  # the version byte, the pair's tag and the key
        self._tail = b""  # the pair's end, the key's kinds and the row's
        self._key: Key = None

    def __call__(self, data: bytes) -> tuple[Key, int]:
        prefix, tail = self._prefix, self._tail
        if prefix is not None and type(data) is bytes and data.startswith(prefix) and data.endswith(tail) \
                and len(data) > len(prefix) + len(tail):
            number = data[len(prefix):len(data) - len(tail)]
            row = int.from_bytes(number[3:3 + int.from_bytes(number[1:3], "big")], "big") if len(number) > 3 else 0
            if _row_bytes(row) == number:
                return self._key, row
        key, row = decode_keyed_row(data)
        decoder = _Decoder(bytes(data), MAX_DEPTH + 1)
        _, end = decoder.value(2, 1)  # the key alone, after the version byte and the pair's tag
        self._prefix, self._key = bytes(data[:end]), key
        self._tail = bytes([_END]) + bytes(data[len(data) - len(decoder._numbers) - 1:])
        return key, row


def _decode(data: bytes, max_depth: int) -> Key:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"a stored key is bytes, not {type(data).__name__}")
    data = bytes(data)
    if not data or data[0] != VERSION:
        found = f"version byte {data[0]}" if data else "no bytes"
        raise ValueError(f"a stored key starts with version byte {VERSION}; found {found}")
    decoder = _Decoder(data, max_depth)
    shape, end = decoder.value(1, 0)
    return decoder.with_kinds(shape, end)


class _Number:
    """A number read from where it stands in a key, until its kind (after the key) says what it is."""

    __slots__ = ("at", "end", "tag", "whole", "fraction")

    def __init__(self, at: int, end: int, tag: int, whole: int = 0, fraction: bytes = b""):
        self.at, self.end, self.tag, self.whole, self.fraction = at, end, tag, whole, fraction


class _Decoder:
    """Reads keys out of one stored key's bytes; every length is checked against what is left, and
    every number must be in the one form `_encode` gives it (so equal keys have equal bytes)."""

    def __init__(self, data: bytes, max_depth: int):
        self._data = data
        self._max_depth = max_depth
        self._numbers: list[_Number] = []

    def value(self, at: int, depth: int) -> tuple[Any, int]:
        """The key starting at byte `at` (its numbers as `_Number`s, in `_numbers` too), and the byte after it."""
        tag = self._byte(at, "a tag")
        if tag == _NONE:
            return None, at + 1
        if tag in (_INFINITY, _NEGATIVE_INFINITY, _ZERO):
            number = _Number(at, at + 1, tag)
        elif tag in (_POSITIVE, _NEGATIVE):
            number = self._magnitude(at, tag)
        elif tag in (_STR, _BYTES):
            raw, end = self._unescaped(at + 1, inverted=False)
            if tag == _BYTES:
                return raw, end
            try:
                return raw.decode("utf-8", "surrogatepass"), end
            except UnicodeDecodeError as error:
                raise ValueError(f"a stored key's text at byte {at + 1} is not UTF-8: {error.reason}") from None
        elif tag == _TUPLE:
            return self._tuple(at + 1, depth)
        else:
            raise ValueError(f"a stored key has an unknown tag {tag:#04x} at byte {at}")
        self._numbers.append(number)
        return number, number.end

    def with_kinds(self, shape: Any, end: int) -> Key:
        """The key `value` read, its numbers made what the kinds from byte `end` (one each, then nothing) say."""
        kinds = self._data[end:]
        if len(kinds) != len(self._numbers):
            raise ValueError(f"a stored key's {len(self._numbers)} numbers have {len(kinds)} kind bytes after "
                             f"it (from byte {end})")
        values = {id(number): self._typed(number, kind) for number, kind in zip(self._numbers, kinds)}
        return _filled(shape, values)

    def _tuple(self, at: int, depth: int) -> tuple[tuple, int]:
        if depth >= self._max_depth:
            raise ValueError(f"a stored key nests tuples deeper than {self._max_depth} levels (at byte {at - 1})")
        items = []
        while self._byte(at, "a tuple") != _END:
            item, at = self.value(at, depth + 1)
            items.append(item)
        return tuple(items), at + 1

    def _magnitude(self, at: int, tag: int) -> _Number:
        negative = tag == _NEGATIVE
        head = self._take(at + 1, 2, "a number's length")
        size = int.from_bytes(head.translate(_INVERTED) if negative else head, "big")
        digits = self._take(at + 3, size, "a number")
        fraction, end = self._unescaped(at + 3 + size, inverted=negative)
        if negative:
            digits, fraction = digits.translate(_INVERTED), fraction.translate(_INVERTED)
        if len(fraction) > _FLOAT_FRACTION_BYTES:
            raise ValueError(f"a stored key's number at byte {at} has more fraction digits than a float holds")
        return _Number(at, end, tag, int.from_bytes(digits, "big"), fraction)

    def _typed(self, number: _Number, kind: int) -> int | float:
        """What `number` is as `kind` says, if its bytes are that value's one form."""
        tag = number.tag
        if kind not in _ZEROS:
            raise ValueError(f"a stored key has an unknown number kind {kind:#04x} for its number at byte {number.at}")
        if tag == _ZERO:
            return _ZEROS[kind]
        if kind in (_INT, _BOOL) and tag in (_POSITIVE, _NEGATIVE) and not number.fraction:
            value: int | float = -number.whole if tag == _NEGATIVE else number.whole
            if kind == _BOOL:
                value = True if value == 1 else value
        elif kind == _FLOAT and tag in (_INFINITY, _NEGATIVE_INFINITY):
            value = math.inf if tag == _INFINITY else -math.inf
        elif kind == _FLOAT and tag in (_POSITIVE, _NEGATIVE):
            scale = 1 << (8 * len(number.fraction))
            try:
                value = (number.whole * scale + int.from_bytes(number.fraction, "big")) / scale
            except OverflowError:
                raise ValueError(f"a stored key's float at byte {number.at} is out of range") from None
            value = -value if tag == _NEGATIVE else value
        else:
            value = None  # no such value: refused below
        canonical, kinds = bytearray(), bytearray()
        if value is not None:
            _encode(value, canonical, kinds)
        if value is None or canonical != self._data[number.at:number.end] or kinds != bytes([kind]):
            raise ValueError(f"a stored key's number at byte {number.at} is not in the one form a key is stored in "
                             f"(kind {kind:#04x})")
        return value

    def _unescaped(self, at: int, inverted: bool) -> tuple[bytes, int]:
        """The escaped bytes from `at` up to their end mark, unescaped (still inverted if they are), and
        the byte after the mark."""
        zero, escape, close = (0xFF, 0x00, 0xFF) if inverted else (0x00, 0xFF, 0x00)
        data, pieces, start = self._data, [], at
        while True:
            found = data.find(zero, at)
            if found < 0 or found + 1 >= len(data):
                raise ValueError(f"a stored key ends inside escaped bytes that start at byte {start}")
            following = data[found + 1]
            if following == close:
                pieces.append(data[at:found])
                return b"".join(pieces), found + 2
            if following != escape:
                raise ValueError(f"a stored key has byte {following:#04x} after an escape at byte {found}")
            pieces.append(data[at:found + 1])
            at = found + 2

    def _byte(self, at: int, what: str) -> int:
        if at >= len(self._data):
            raise ValueError(f"a stored key ends inside {what} at byte {at}")
        return self._data[at]

    def _take(self, at: int, size: int, what: str) -> bytes:
        if size > len(self._data) - at:
            raise ValueError(f"a stored key ends inside {what} at byte {at} ({size} bytes wanted, "
                             f"{len(self._data) - at} left)")
        return self._data[at:at + size]


def _filled(shape: Any, values: dict[int, Key]) -> Key:
    """`shape` with each `_Number` in it replaced by its value."""
    if isinstance(shape, _Number):
        return values[id(shape)]
    if isinstance(shape, tuple):
        return tuple(_filled(item, values) for item in shape)
    return shape
