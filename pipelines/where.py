"""The key of an example in a conversion pipeline: the input it came from and its position there.

Keys sort as the input does (file by file, then by position), which is what
`WriteToArrowShards(..., deterministic=True)` writes rows in, and print as a person
names the input ("data.csv, line 7"), which is what every error about the example says.
"""

from __future__ import annotations

from typing import NamedTuple


class Where(NamedTuple):
    """An example's key: `(source, position, name)`, sorting by source then position.

    Example:
        >>> key = Where.at("data.csv", 7, "line")
        >>> print(key)
        data.csv, line 7
        >>> key < Where.at("data.csv", 10, "line")
        True

    Args:
      source: the input file (or another name for where examples come from).
      position: the example's place in `source`: a line, row or record number.
      name: how messages name the example; by default "source, position".
    """

    source: str
    position: int
    name: str = ""

    @classmethod
    def at(cls, source: str, position: int, unit: str) -> Where:
        """The key of the example at `unit` (line, row, record...) `position` of `source`."""
        return cls(source, position, f"{source}, {unit} {position}")

    def __str__(self) -> str:
        return self.name or f"{self.source}, {self.position}"

    def __repr__(self) -> str:
        # Errors quote an example's key with !r; a key reads as the input it names.
        return repr(str(self))
