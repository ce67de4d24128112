"""JSON nesting: the bound the package holds JSON to, and how deeply text or values nest.

Python's JSON parser and `json.dumps` recurse, so a document 100,000 levels deep ends in a
RecursionError; the measures here never recurse (text is measured on its brackets, in time
linear in it), so whoever reads JSON that others wrote (an input line, a schema's Hugging Face
metadata, a manifest, a `Json` column) or writes values users gave can refuse it past
`MAX_DEPTH` levels first.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

# How deeply JSON may nest lists and objects (a manifest with its features and metadata, a
# `Json` value, an input line), so that every reader, the CLI and json.dumps handle it far
# from Python's recursion limit.
MAX_DEPTH = 64
_NEITHER_QUOTE_NOR_BRACKET = bytes(byte for byte in range(256) if byte not in b'"[]{}')
# Brackets are counted in chunks of this many, to keep the counting's memory small.
_CHUNK = 1 << 20


def json_text_depth(text: bytes | bytearray) -> int:
    """How many levels of lists and objects JSON text in UTF-8 nests: 0 for a number or a
    string, 1 for a flat list. For text that is not JSON, at least as many as a parser opens
    before it fails: brackets are counted outside strings, whatever their kinds.

    Example:
        >>> json_text_depth(b'{"a": [1, "]]][[["]}')
        2
    """
    if b"\\" in text:
        # Outside strings, valid JSON holds no backslash: in a run of them each pair is one
        # escaped backslash, and an odd one out escapes what follows (a quote, if anything here).
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    data = np.frombuffer(text.translate(None, _NEITHER_QUOTE_NOR_BRACKET), np.uint8)
    deepest = level = quotes = 0  # quotes: 1 when the chunks before end inside a string
    for start in range(0, len(data), _CHUNK):
        chunk = data[start:start + _CHUNK]
        is_quote = chunk == ord('"')
        # A bracket is outside strings when an even number of quotes comes before it.
        outside = ((quotes + np.cumsum(is_quote, dtype=np.int32)) & 1) == 0
        opening = ((chunk == ord("[")) | (chunk == ord("{"))) & outside
        closing = ((chunk == ord("]")) | (chunk == ord("}"))) & outside
        levels = level + np.cumsum(opening.astype(np.int32) - closing)
        deepest, level, quotes = max(deepest, int(levels.max())), int(levels[-1]), int(not outside[-1])
    return deepest


def json_depth(value: Any) -> int:
    """How many levels of lists and objects `value` (parsed JSON) nests: 0 for a number or a
    string, 1 for a flat list. Counted level by level, so any depth is measured safely."""
    depth, level = 0, [value]
    while True:
        containers = [node for node in level if isinstance(node, (dict, list))]
        if not containers:
            return depth
        depth += 1
        level = [item for node in containers for item in (node.values() if isinstance(node, dict) else node)]


class TooDeep(ValueError):
    """JSON text nests lists and objects deeper than `MAX_DEPTH` levels."""


def load_bounded(text: str) -> Any:
    """`text` parsed as JSON without NaN or infinities, once it is measured to nest at most
    `MAX_DEPTH` levels. Text rather than bytes, which the parser may read as UTF-16 or
    UTF-32, where the brackets are not the bytes counted.

    Raises:
      TooDeep: it nests deeper (the message says how deep). ValueError: it is not such JSON.
    """
    if text.count("[") + text.count("{") > MAX_DEPTH:
        depth = json_text_depth(text.encode("utf-8", "surrogatepass"))
        if depth > MAX_DEPTH:
            raise TooDeep(f"nests {depth:,} levels of JSON; at most {MAX_DEPTH} are read")
    return json.loads(text, parse_constant=_refuse_constant)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")
