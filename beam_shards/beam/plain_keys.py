"""What a deterministic write's key may hold, and its plain form: None, a bool, int, float (not NaN: it
does not sort) or str or bytes, or a tuple of keys nested at most `MAX_DEPTH` deep. A named tuple
(the pipelines' `Where`) is a tuple and subclasses of the other types count as their base type, so
no code of a key's own runs when it is stored or compared (`keys` stores the plain form).
"""

from __future__ import annotations

from typing import Any, Union

Key = Union[None, bool, int, float, str, bytes, tuple]
MAX_DEPTH = 64
MAX_INT_BYTES = 0xFFFF  # a stored int's length takes 2 bytes (`keys`)
_KEY_TYPES = "tuples of str, int, float, bytes, bool and None"


def plain_key(key: Any) -> Key:
    """`key` in its plain form (tuples for named tuples, base types for subclasses), checked.

    Raises:
      TypeError: `key` is or holds a value of another type (a list, a numpy scalar, an
        object...), naming its type, where it is in the key and the key; or a NaN (it does not
        sort) or an int of more than 65,535 bytes; or is nested deeper than `MAX_DEPTH`.
    """
    return _plain(key, key, "key", 0)


def _plain(value: Any, key: Any, where: str, depth: int) -> Key:
    if _is_plain_scalar(value):
        return value
    kind = type(value)
    if isinstance(value, tuple) and depth < MAX_DEPTH and all(map(_is_plain_scalar, value)):
        return value if kind is tuple else tuple(value)  # a key of a pipeline, whose places need no names
    if kind is int:
        raise TypeError(f"the key {short_key(key)} holds an int of more than {MAX_INT_BYTES:,} bytes at {where}")
    if kind is float:
        raise TypeError(f"the key {short_key(key)} holds a NaN at {where}, which does not sort; deterministic "
                        "write keys must sort")
    if isinstance(value, tuple):
        if depth >= MAX_DEPTH:
            raise TypeError(f"the key {short_key(key)} nests tuples deeper than {MAX_DEPTH} levels (at {where})")
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
    raise TypeError(f"deterministic write keys are {_KEY_TYPES}; the key {short_key(key)} {what}{hint}")


def _is_plain_scalar(value: Any) -> bool:
    """Whether `value` is a key's scalar in its plain form already (`_plain` would give it back)."""
    kind = type(value)
    return (value is None or kind is bool or kind is str or kind is bytes
            or kind is int and value.bit_length() <= 8 * MAX_INT_BYTES or kind is float and value == value)


def short_key(key: Any) -> str:
    """`repr(key)`, cut at 200 characters, for errors."""
    try:
        text = repr(key)
    except ValueError:  # Python prints no int of more than 4,300 digits
        text = f"<a {type(key).__name__} holding an int too long to print>"
    return text if len(text) <= 200 else text[:200] + "..."
