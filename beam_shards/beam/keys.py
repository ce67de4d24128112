"""The keys of a deterministic write, in a plain binary encoding: decoding stored bytes builds
values, never runs code.

A key is None, a bool, int, float, str or bytes, or a tuple of keys nested at most
`MAX_DEPTH` deep (a named tuple such as the pipelines' `Where` is a tuple; subclasses of
the other types count as their base type). The encoding round-trips a key exactly (as its
plain form: tuples, and the base types), so decoded keys sort as the keys did.

Format: one version byte, `VERSION`, then the key:

    N                  None
    T | F              True | False
    i <n> <n bytes>    int: two's complement, big-endian
    f <8 bytes>        float: IEEE 754 binary64, big-endian (NaN payloads and -0.0 kept)
    s <n> <n bytes>    str: UTF-8 (lone surrogates passed through)
    b <n> <n bytes>    bytes
    t <n> <n keys>     tuple of n keys

`<n>` is an unsigned LEB128 varint of at most `_MAX_VARINT_BYTES` bytes. Anything else (an
unknown tag, a length past the end, bytes after the key, a tuple nested too deep) is
refused by `decode_key` with a `ValueError` naming the offset.

A deterministic write stores each row's `(key, row of its element)` pair this way
(`encode_keyed_rows`, read back by `decode_keyed_row`).
"""

from __future__ import annotations

import struct
from typing import Any, Union

Key = Union[None, bool, int, float, str, bytes, tuple]
VERSION = 1
MAX_DEPTH = 64
_MAX_VARINT_BYTES = 8
_FLOAT = struct.Struct(">d")
_CONSTANTS = {b"N": None, b"T": True, b"F": False}
_KEY_TYPES = "tuples of str, int, float, bytes, bool and None"


def plain_key(key: Any) -> Key:
    """`key` in its plain form (tuples for named tuples, base types for subclasses), checked.

    Raises:
      TypeError: `key` is or holds a value of another type (a list, a numpy scalar, an
        object...), naming its type, where it is in the key and the key; or is nested
        deeper than `MAX_DEPTH`.
    """
    return _plain(key, key, "key", 0)


def _plain(value: Any, key: Any, where: str, depth: int) -> Key:
    if value is None or type(value) in (bool, int, float, str, bytes):
        return value
    if isinstance(value, tuple):
        if depth >= MAX_DEPTH:
            raise TypeError(f"the key {_short(key)} nests tuples deeper than {MAX_DEPTH} levels (at {where})")
        return tuple(_plain(item, key, f"{where}[{index}]", depth + 1) for index, item in enumerate(value))
    # Subclasses (IntEnum, numpy's float64 and str_...) as their base type, bypassing their own __str__ and such.
    if isinstance(value, int) and not isinstance(value, bool):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return bytes(memoryview(value))
    kind = f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")
    what = f"is a {kind}" if where == "key" else f"holds a {kind} at {where}"
    hint = ("; use a tuple" if isinstance(value, list) else
            "; convert it with .item()" if type(value).__module__ == "numpy" else "")
    raise TypeError(f"deterministic write keys are {_KEY_TYPES}; the key {_short(key)} {what}{hint}")


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
    head = bytearray([VERSION, ord("t"), 2])
    _encode(plain_key(key), head)
    out = []
    for row in range(rows):
        item = bytearray(head)
        _encode(row, item)
        out.append(bytes(item))
    return out


def _encode(value: Key, out: bytearray) -> None:
    if value is None:
        out += b"N"
    elif value is True or value is False:
        out += b"T" if value else b"F"
    elif isinstance(value, int):
        data = value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True)
        _sized(b"i", data, out)
    elif isinstance(value, float):
        out += b"f" + _FLOAT.pack(value)
    elif isinstance(value, str):
        _sized(b"s", value.encode("utf-8", "surrogatepass"), out)
    elif isinstance(value, bytes):
        _sized(b"b", value, out)
    else:
        out += b"t"
        _varint(len(value), out)
        for item in value:
            _encode(item, out)


def _sized(tag: bytes, data: bytes, out: bytearray) -> None:
    out += tag
    _varint(len(data), out)
    out += data


def _varint(number: int, out: bytearray) -> None:
    while number >= 0x80:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)


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
            if end == len(data) and type(row) is int and row >= 0:
                return self._key, row
        key, row = decode_keyed_row(data)
        # A pair is the version byte, then a tuple tag and its count 2, then the key and the row.
        self._prefix = None
        if isinstance(data, bytes) and data[1:3] == b"t\x02":
            self._key, end = _Decoder(data, MAX_DEPTH + 1).value(3, 1)
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
    """Reads keys out of one stored key's bytes; every length is checked against what is left."""

    def __init__(self, data: bytes, max_depth: int):
        self._data = data
        self._max_depth = max_depth

    def value(self, at: int, depth: int) -> tuple[Key, int]:
        """The key starting at byte `at`, and the byte after it."""
        tag = self._take(at, 1, "a tag")
        at += 1
        if tag in _CONSTANTS:
            return _CONSTANTS[tag], at
        if tag == b"f":
            return _FLOAT.unpack(self._take(at, 8, "a float"))[0], at + 8
        if tag == b"t":
            return self._tuple(at, depth)
        if tag not in (b"i", b"s", b"b"):
            raise ValueError(f"a stored key has an unknown tag {tag[0]:#04x} at byte {at - 1}")
        size, at = self._varint(at)
        raw = self._take(at, size, "a value")
        if tag == b"b":
            return raw, at + size
        if tag == b"i":
            return int.from_bytes(raw, "big", signed=True), at + size
        try:
            return raw.decode("utf-8", "surrogatepass"), at + size
        except UnicodeDecodeError as error:
            raise ValueError(f"a stored key's text at byte {at} is not UTF-8: {error.reason}") from None

    def _tuple(self, at: int, depth: int) -> tuple[tuple, int]:
        if depth >= self._max_depth:
            raise ValueError(f"a stored key nests tuples deeper than {self._max_depth} levels (at byte {at - 1})")
        count, at = self._varint(at)
        if count > len(self._data) - at:  # every item takes a byte at least
            raise ValueError(f"a stored key's tuple at byte {at} claims {count} items; "
                             f"{len(self._data) - at} bytes are left")
        items = []
        for _ in range(count):
            item, at = self.value(at, depth + 1)
            items.append(item)
        return tuple(items), at

    def _varint(self, at: int) -> tuple[int, int]:
        number = 0
        for index in range(_MAX_VARINT_BYTES):
            byte = self._take(at + index, 1, "a length")[0]
            number |= (byte & 0x7F) << (7 * index)
            if not byte & 0x80:
                return number, at + index + 1
        raise ValueError(f"a stored key's length at byte {at} is longer than {_MAX_VARINT_BYTES} bytes")

    def _take(self, at: int, size: int, what: str) -> bytes:
        if size > len(self._data) - at:
            raise ValueError(f"a stored key ends inside {what} at byte {at} ({size} bytes wanted, "
                             f"{len(self._data) - at} left)")
        return self._data[at:at + size]
