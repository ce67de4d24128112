"""The keys of a deterministic write, in a plain binary encoding whose byte order is the keys'
order: a chunk's rows sort by their stored keys' bytes (Arrow's sort, no key decoded in Python),
and decoding stored bytes builds values, never runs code.

A key is None, a bool, int, float (not NaN: it does not sort) or str or bytes, or a tuple of
keys nested at most `MAX_DEPTH` deep (a named tuple such as the pipelines' `Where` is a tuple;
subclasses of the other types count as their base type). The encoding round-trips a key
exactly (as its plain form: tuples, and the base types), and two keys' bytes compare as the
keys do (`<` on them), for keys that Python orders; keys Python holds equal but of other types
(1, 1.0 and True; 0.0 and -0.0) are ordered by type.

Format: one version byte, `VERSION`, then the key:

    0x02                        None
    0x11 | 0x15                 -inf | inf
    0x12 ~<magnitude> <kind>    a negative number (every byte of its magnitude inverted)
    0x13 <kind>                 zero
    0x14 <magnitude> <kind>     a positive number
    0x20 <escaped> 00 00        str: UTF-8 (lone surrogates passed through)
    0x30 <escaped> 00 00        bytes
    0x40 <key>... 00            tuple

A number's magnitude is its integer part (2 bytes of length, big-endian, then its bytes
big-endian with no leading zero byte) and its fraction (the bytes of its binary digits,
with no trailing zero byte, escaped, then 00 00); `<kind>` says what it was: 00 int, 01 bool,
02 float, 03 the float -0.0. Escaped: each 00 byte as 00 FF, so the end mark 00 00 sorts
before any byte that may follow, and a prefix before what it prefixes. Anything else (an
unknown tag, a length past the end, a number not in this one form, bytes after the key, a
tuple nested too deep) is refused by `decode_key` with a `ValueError` naming the offset.

A deterministic write stores each row's `(key, row of its element)` pair this way
(`encode_keyed_rows`, read back by `decode_keyed_row`).
"""

from __future__ import annotations

import math
from typing import Any, Union

Key = Union[None, bool, int, float, str, bytes, tuple]
VERSION = 2
MAX_DEPTH = 64
_NONE, _NEGATIVE_INFINITY, _NEGATIVE, _ZERO, _POSITIVE, _INFINITY = 0x02, 0x11, 0x12, 0x13, 0x14, 0x15
_STR, _BYTES, _TUPLE, _END = 0x20, 0x30, 0x40, 0x00
_INT, _BOOL, _FLOAT, _NEGATIVE_ZERO = 0, 1, 2, 3  # a number's kind
_ZEROS = {_INT: 0, _BOOL: False, _FLOAT: 0.0, _NEGATIVE_ZERO: -0.0}
_MAX_INT_BYTES = 0xFFFF  # an integer part's length takes 2 bytes
# The most bytes a float's integer part (below 2^1024) and fraction (binary digits to 2^-1074) take.
_FLOAT_WHOLE_BYTES, _FLOAT_FRACTION_BYTES = 128, 135
_INVERTED = bytes(range(255, -1, -1))  # a translation table: every byte inverted
_KEY_TYPES = "tuples of str, int, float, bytes, bool and None"
# How every stored (key, row) pair begins (the version byte, a tuple's tag) and ends (the tuple's end).
PAIR_HEAD, PAIR_END = bytes([VERSION, _TUPLE]), bytes([_END])


def plain_key(key: Any) -> Key:
    """`key` in its plain form (tuples for named tuples, base types for subclasses), checked.

    Raises:
      TypeError: `key` is or holds a value of another type (a list, a numpy scalar, an
        object...), naming its type, where it is in the key and the key; or a NaN (it does not
        sort) or an int of more than 65,535 bytes; or is nested deeper than `MAX_DEPTH`.
    """
    return _plain(key, key, "key", 0)


def _plain(value: Any, key: Any, where: str, depth: int) -> Key:
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is bytes:
        return value
    if isinstance(value, tuple) and depth < MAX_DEPTH and all(map(_is_plain_scalar, value)):
        return value if kind is tuple else tuple(value)  # a key of a pipeline, whose places need no names
    if kind is int:
        if value.bit_length() > 8 * _MAX_INT_BYTES:
            raise TypeError(f"the key {_short(key)} holds an int of more than {_MAX_INT_BYTES:,} bytes at {where}")
        return value
    if kind is float:
        if value != value:
            raise TypeError(f"the key {_short(key)} holds a NaN at {where}, which does not sort; deterministic "
                            "write keys must sort")
        return value
    if isinstance(value, tuple):
        if depth >= MAX_DEPTH:
            raise TypeError(f"the key {_short(key)} nests tuples deeper than {MAX_DEPTH} levels (at {where})")
        return tuple(_plain(item, key, f"{where}[{index}]", depth + 1) for index, item in enumerate(value))
    # Subclasses (IntEnum, numpy's float64 and str_...) as their base type, bypassing their own __str__ and such.
    if isinstance(value, int) and not isinstance(value, bool):
        return _plain(int.__int__(value), key, where, depth)
    if isinstance(value, float):
        return _plain(float.__float__(value), key, where, depth)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return bytes(memoryview(value))
    kind_name = f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")
    what = f"is a {kind_name}" if where == "key" else f"holds a {kind_name} at {where}"
    hint = ("; use a tuple" if isinstance(value, list) else
            "; convert it with .item()" if type(value).__module__ == "numpy" else "")
    raise TypeError(f"deterministic write keys are {_KEY_TYPES}; the key {_short(key)} {what}{hint}")


def _is_plain_scalar(value: Any) -> bool:
    """Whether `value` is a key's scalar in its plain form already (`_plain` would give it back)."""
    kind = type(value)
    return (value is None or kind is bool or kind is str or kind is bytes
            or kind is int and value.bit_length() <= 8 * _MAX_INT_BYTES or kind is float and value == value)


def _short(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 200 else text[:200] + "..."


def encode_key(key: Any) -> bytes:
    """The stored bytes of `key` (see the module's format).

    Raises:
      TypeError: as `plain_key`.
    """
    out = bytearray([VERSION])
    _encode(plain_key(key), out)
    return bytes(out)


def encode_keyed_rows(key: Any, rows: int) -> list[bytes]:
    """The stored bytes of `(key, 0)`, `(key, 1)`, ... `(key, rows - 1)`, the key encoded once."""
    head = bytearray([VERSION, _TUPLE])
    _encode(plain_key(key), head)
    head = bytes(head)
    out = [head + bytes([_ZERO, _INT, _END])]
    for row in range(1, rows):
        item = bytearray(head)
        _number(row, b"", False, _INT, item)
        item.append(_END)
        out.append(bytes(item))
    return out


def _encode(value: Key, out: bytearray) -> None:
    kind = type(value)
    if value is None:
        out.append(_NONE)
    elif kind is bool or kind is int:
        if value:
            _number(abs(value), b"", value < 0, _BOOL if kind is bool else _INT, out)
        else:
            out += bytes([_ZERO, _BOOL if kind is bool else _INT])
    elif kind is float:
        if value == 0:
            out += bytes([_ZERO, _NEGATIVE_ZERO if math.copysign(1.0, value) < 0 else _FLOAT])
        elif math.isinf(value):
            out.append(_INFINITY if value > 0 else _NEGATIVE_INFINITY)
        else:
            numerator, denominator = abs(value).as_integer_ratio()  # the denominator is a power of two
            whole, rest = divmod(numerator, denominator)
            bits = denominator.bit_length() - 1
            pad = -bits % 8
            fraction = (rest << pad).to_bytes((bits + pad) // 8, "big").rstrip(b"\x00")
            _number(whole, fraction, value < 0, _FLOAT, out)
    elif kind is str:
        out.append(_STR)
        out += _escaped(value.encode("utf-8", "surrogatepass"))
    elif kind is bytes:
        out.append(_BYTES)
        out += _escaped(value)
    else:
        out.append(_TUPLE)
        for item in value:
            _encode(item, out)
        out.append(_END)


def _number(whole: int, fraction: bytes, negative: bool, kind: int, out: bytearray) -> None:
    """A nonzero number: its magnitude (`whole` and the `fraction`'s bytes), inverted when negative, then its kind."""
    digits = whole.to_bytes((whole.bit_length() + 7) // 8, "big")
    magnitude = len(digits).to_bytes(2, "big") + digits + _escaped(fraction)
    if negative:
        out.append(_NEGATIVE)
        out += magnitude.translate(_INVERTED)
    else:
        out.append(_POSITIVE)
        out += magnitude
    out.append(kind)


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
        raise ValueError(f"a stored row key is a (key, row) pair; found {_short(pair)}")
    return pair


class KeyedRowDecoder:
    """`decode_keyed_row` for a column of stored rows: a run of rows that share their key (as
    `encode_keyed_rows` writes them) decodes the key once and then only each row's number,
    with the same checks."""

    def __init__(self):
        self._prefix: bytes | None = None
        self._key: Key = None

    def __call__(self, data: bytes) -> tuple[Key, int]:
        prefix = self._prefix
        if prefix is not None and isinstance(data, bytes) and data.startswith(prefix):
            try:
                row, end = _Decoder(data, MAX_DEPTH + 1).value(len(prefix), 1)
            except ValueError:
                row, end = None, -1
            if end == len(data) - 1 and data[end] == _END and type(row) is int and row >= 0:
                return self._key, row
        key, row = decode_keyed_row(data)
        # A pair is the version byte, then a tuple's tag, then the key and the row.
        self._key, end = _Decoder(data, MAX_DEPTH + 1).value(2, 1)
        self._prefix = data[:end]
        return key, row


def _decode(data: bytes, max_depth: int) -> Key:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"a stored key is bytes, not {type(data).__name__}")
    data = bytes(data)
    if not data or data[0] != VERSION:
        found = f"version byte {data[0]}" if data else "no bytes"
        raise ValueError(f"a stored key starts with version byte {VERSION}; found {found}")
    key, end = _Decoder(data, max_depth).value(1, 0)
    if end != len(data):
        raise ValueError(f"a stored key ends at byte {end} but {len(data) - end} more bytes follow")
    return key


class _Decoder:
    """Reads keys out of one stored key's bytes; every length is checked against what is left, and
    every number must be in the one form `_encode` gives it (so equal keys have equal bytes)."""

    def __init__(self, data: bytes, max_depth: int):
        self._data = data
        self._max_depth = max_depth

    def value(self, at: int, depth: int) -> tuple[Key, int]:
        """The key starting at byte `at`, and the byte after it."""
        tag = self._byte(at, "a tag")
        if tag == _NONE:
            return None, at + 1
        if tag in (_INFINITY, _NEGATIVE_INFINITY):
            return (math.inf if tag == _INFINITY else -math.inf), at + 1
        if tag == _ZERO:
            kind = self._byte(at + 1, "a number's kind")
            if kind not in _ZEROS:
                raise ValueError(f"a stored key has an unknown number kind {kind:#04x} at byte {at + 1}")
            return _ZEROS[kind], at + 2
        if tag in (_POSITIVE, _NEGATIVE):
            return self._number(at, tag == _NEGATIVE)
        if tag in (_STR, _BYTES):
            raw, end = self._unescaped(at + 1, inverted=False)
            if tag == _BYTES:
                return raw, end
            try:
                return raw.decode("utf-8", "surrogatepass"), end
            except UnicodeDecodeError as error:
                raise ValueError(f"a stored key's text at byte {at + 1} is not UTF-8: {error.reason}") from None
        if tag == _TUPLE:
            return self._tuple(at + 1, depth)
        raise ValueError(f"a stored key has an unknown tag {tag:#04x} at byte {at}")

    def _tuple(self, at: int, depth: int) -> tuple[tuple, int]:
        if depth >= self._max_depth:
            raise ValueError(f"a stored key nests tuples deeper than {self._max_depth} levels (at byte {at - 1})")
        items = []
        while self._byte(at, "a tuple") != _END:
            item, at = self.value(at, depth + 1)
            items.append(item)
        return tuple(items), at + 1

    def _number(self, at: int, negative: bool) -> tuple[int | float, int]:
        head = self._take(at + 1, 2, "a number's length")
        size = int.from_bytes(head.translate(_INVERTED) if negative else head, "big")
        digits = self._take(at + 3, size, "a number")
        fraction, end = self._unescaped(at + 3 + size, inverted=negative)
        if negative:
            digits, fraction = digits.translate(_INVERTED), fraction.translate(_INVERTED)
        kind = self._byte(end, "a number's kind")
        whole = int.from_bytes(digits, "big")
        if kind in (_INT, _BOOL) and not fraction:
            value: int | float = -whole if negative else whole
            if kind == _BOOL:
                value = True if value == 1 else value
        elif kind == _FLOAT:
            if len(digits) > _FLOAT_WHOLE_BYTES or len(fraction) > _FLOAT_FRACTION_BYTES:
                raise ValueError(f"a stored key's float at byte {at} has more digits than a float holds")
            scale = 1 << (8 * len(fraction))
            try:
                value = (whole * scale + int.from_bytes(fraction, "big")) / scale
            except OverflowError:
                raise ValueError(f"a stored key's float at byte {at} is out of range") from None
            value = -value if negative else value
        else:
            raise ValueError(f"a stored key's number at byte {at} is not in the one form a key is stored in "
                             f"(kind {kind:#04x})")
        canonical = bytearray()
        _encode(value, canonical)
        if canonical != self._data[at:end + 1]:
            raise ValueError(f"a stored key's number at byte {at} is not in the one form a key is stored in")
        return value, end + 1

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
