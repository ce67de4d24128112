"""What a training state is bound to: the rows a dataset reads, in their order (pure logic).

A `ShardedDataset` names its rows as `<rows id> version <N>, <view>, <count> rows`: the write
that wrote the rows (`Manifest.rows_identity`: a version's own write id, or for a version
`compact` made, the id its parent's rows carry), the version it was opened on, which of
the version's rows it holds, and how many. A sampler state saves that name; it is valid on
a dataset whose name agrees on everything but the version, since only `compact` makes
another version of the same rows. For any other version the refusal names the version to
open. Names saved before the rows id existed are of the same form, with the version's own
write id, so states saved then stay valid.
"""

from __future__ import annotations

import re
from typing import Any

_NAME = re.compile(r"(?P<rows>\S+) version (?P<version>[0-9]+), (?P<view>.+), (?P<count>[0-9]+) rows")


def rows_name(rows_id: str, version: int, view: str, count: int) -> str:
    """The name of `count` rows (`view`) of version `version`, whose rows the write `rows_id` wrote."""
    return f"{rows_id} version {version}, {view}, {count} rows"


def same_rows(saved: Any, mine: str | None) -> bool:
    """Whether `saved` (a state's "dataset") names the rows `mine` names: equal, or equal but for the
    version (a version `compact` made of the other)."""
    if not isinstance(saved, str) or mine is None:
        return saved is None and mine is None
    if saved == mine:
        return True
    found, own = _NAME.fullmatch(saved), _NAME.fullmatch(mine)
    return bool(found and own) and all(found[part] == own[part] for part in ("rows", "view", "count"))


def version_hint(saved: Any, mine: str | None) -> str:
    """Which version to open for a state whose rows, `saved`, are not those `mine` names: the version
    the state was taken on, when it is another than this dataset's; empty otherwise."""
    found = _NAME.fullmatch(saved) if isinstance(saved, str) else None
    own = _NAME.fullmatch(mine) if mine is not None else None
    if found is None or (own is not None and own["version"] == found["version"]):
        return ""
    version = int(found["version"])
    return f"; the state was taken on version {version}; open it with ShardedDataset(path, version={version})"
