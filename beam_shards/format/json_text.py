"""How deeply JSON text nests, measured on its brackets before anything parses it.

Python's JSON parser recurses, so a document 100,000 levels deep ends in a RecursionError;
this measure never recurses, and takes time linear in the text, so whoever reads JSON that
others wrote (an input line, a schema's Hugging Face metadata) can refuse it past
`MAX_DEPTH` levels first.
"""

from __future__ import annotations

import numpy as np

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
