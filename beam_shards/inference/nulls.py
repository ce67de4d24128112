"""Which CSV cells are null: pandas' default tokens, or those `--na_values` gives, per column too."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

# pandas' default null tokens (pandas.read_csv's na_values), in its order.
NA_VALUES = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
             "NA", "NULL", "NaN", "None", "n/a", "nan", "null")


@dataclasses.dataclass(frozen=True)
class NullTokens:
    """The null tokens of each column: `default` for every column not in `columns`.

    Example:
        >>> tokens = NullTokens.parse(["-", "n=?", "n=none"])
        >>> tokens.tokens_for("n"), tokens.tokens_for("other")
        (['?', 'none'], ['-'])
    """

    default: tuple[str, ...] = NA_VALUES
    columns: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, values: Sequence[str] | None) -> NullTokens:
        """The tokens `--na_values` gives: None (or none) keeps pandas' defaults; `TOKEN` entries
        replace them for every column; `col=TOKEN` entries are the tokens of column `col` alone,
        in place of the others (as pandas' dict form without its defaults). A token holding `=`
        can be given per column only (`col=a=b`).

        Raises:
          ValueError: an entry `=TOKEN`, with no column name before its `=`.
        """
        default: list[str] = []
        columns: dict[str, list[str]] = {}
        for value in values or ():
            column, equals, token = value.partition("=")
            if not equals:
                default.append(value)
            elif not column:
                raise ValueError(f"--na_values {value!r}: no column name before '=' (give COLUMN=TOKEN, or TOKEN "
                                 "for every column)")
            else:
                columns.setdefault(column, []).append(token)
        return cls(tuple(dict.fromkeys(default)) if default else NA_VALUES,
                   {column: tuple(dict.fromkeys(tokens)) for column, tokens in columns.items()})

    def tokens_for(self, column: str) -> list[str]:
        """The cells of `column` that are null."""
        return list(self.columns.get(column, self.default))

    def apply(self, column: str, array: pa.Array) -> pa.Array:
        """`array` (cells of `column` as strings) with the cells equal to one of its tokens made null."""
        tokens = self.tokens_for(column)
        if not tokens or len(array) == 0:
            return array
        hit = pc.is_in(array, value_set=pa.array(tokens, array.type))
        return pc.if_else(hit, pa.scalar(None, array.type), array)
