"""Which CSV cells are null: pandas' default tokens, or those `--na_values` names, per column too.

An empty cell is always null (where the feature allows one); `--na_values TOKEN...`
replaces the other default tokens, and `--na_values col=TOKEN` adds a token for one
column only.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

# pandas.read_csv's default null tokens (its STR_NA_VALUES), the ones R, Excel and pandas itself write.
DEFAULT_TOKENS = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>",
                  "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null")


class NullTokens:
    """The cells that stand for null, for every column and for some alone.

    Example:
        >>> tokens = NullTokens.from_flags(["NA", "weight=-1"])
        >>> sorted(tokens.of("weight")), sorted(tokens.of("name"))
        (['', '-1', 'NA'], ['', 'NA'])

    Args:
      tokens: the tokens of every column ("" is added: an empty cell is always null).
      per_column: more tokens for single columns.
    """

    def __init__(self, tokens: Sequence[str] = DEFAULT_TOKENS, per_column: dict[str, Sequence[str]] | None = None):
        self._tokens = frozenset(tokens) | {""}
        self._per_column = {name: self._tokens | frozenset(more) for name, more in (per_column or {}).items()}

    @classmethod
    def from_flags(cls, values: Sequence[str] | None) -> NullTokens:
        """The tokens `--na_values` gives: `TOKEN` for every column, `col=TOKEN` for one; None: the defaults."""
        if values is None:
            return cls()
        tokens, per_column = [], {}
        for value in values:
            if "=" in value:
                name, token = value.split("=", 1)
                per_column.setdefault(name, []).append(token)
            else:
                tokens.append(value)
        return cls(tokens, per_column)

    def of(self, column: str) -> frozenset[str]:
        """The tokens that make a cell of `column` null."""
        return self._per_column.get(column, self._tokens)

    def apply(self, column: str, cells: pa.Array) -> pa.Array:
        """`cells` (strings) with each null token made null."""
        nulls = pc.is_in(cells, value_set=pa.array(sorted(self.of(column)), pa.string()))
        if not pc.any(nulls).as_py():
            return cells
        return pc.if_else(nulls, pa.scalar(None, cells.type), cells)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, NullTokens) and self._tokens == other._tokens
                and self._per_column == other._per_column)

    def __repr__(self) -> str:
        return f"NullTokens({sorted(self._tokens)!r}, {self._per_column!r})"
