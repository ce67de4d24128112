"""What a training state is bound to: the rows a dataset reads, in their order (pure logic).

A `ShardedDataset` names its rows as `<rows id> version <N>, <view>, <count> rows`: the write
that wrote the rows (`Manifest.rows_identity`: a version's own write id, or for a version
`compact` made, the id its parent's rows carry), the version it was opened on, which of
the version's rows it holds, and how many. A sampler state saves that name; it is valid on
a dataset whose name agrees on everything but the version, since only `compact` makes
another version of the same rows. For any other version the refusal names the version to
open. Names saved before the rows id existed are of the same form, with the version's own
write id, so states saved then stay valid.

A `Mixture` names its rows as `mixture {json}`: its seed, epoch size, columns and source
column, and each source's name, weight, rows per epoch and rows (a name as above). A state
of a mixture is valid on a mixture whose name agrees on all of these but the weights (equal
rows per epoch read the same rows) and each source's version (as for one cache); a refusal
names what changed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from beam_shards.display import clip

_NAME = re.compile(r"(?P<rows>\S+) version (?P<version>[0-9]+), (?P<view>.+), (?P<count>[0-9]+) rows")


def rows_name(rows_id: str, version: int, view: str, count: int) -> str:
    """The name of `count` rows (`view`) of version `version`, whose rows the write `rows_id` wrote."""
    return f"{rows_id} version {version}, {view}, {count} rows"


_MIXTURE = "mixture "
_MIXTURE_KEYS = ("seed", "epoch_size", "columns", "source_column")
_SOURCE_KEYS = {"name", "weight", "rows_per_epoch", "rows"}


def mixture_name(seed: int, epoch_size: int, columns: Sequence[str], source_column: str,
                 sources: Sequence[tuple[str, float, int, str]]) -> str:
    """The name of a mixture's rows; `sources` holds each source's (name, weight, rows per epoch, rows name)."""
    return _MIXTURE + json.dumps({
        "seed": seed, "epoch_size": epoch_size, "columns": list(columns), "source_column": source_column,
        "sources": [{"name": name, "weight": weight, "rows_per_epoch": count, "rows": rows}
                    for name, weight, count, rows in sources]}, sort_keys=True)


def _mixture(name: Any) -> dict[str, Any] | None:
    """The parts of a mixture's name, or None for anything else (a cache's name, a damaged one)."""
    if not (isinstance(name, str) and name.startswith(_MIXTURE)):
        return None
    try:
        parts = json.loads(name[len(_MIXTURE):])
    except ValueError:
        return None
    ok = (isinstance(parts, dict) and set(parts) == {*_MIXTURE_KEYS, "sources"} and isinstance(parts["sources"], list)
          and all(isinstance(source, dict) and set(source) == _SOURCE_KEYS for source in parts["sources"]))
    return parts if ok else None


def mixture_changes(saved: Any, mine: str | None) -> list[str]:
    """What differs between the mixture a state names (`saved`) and this one (`mine`), as
    "what saved -> mine"; empty when they read the same rows."""
    old, new = _mixture(saved), _mixture(mine)
    if old is None or new is None:
        return [f"the state is not of a mixture like this one: {clip(repr(saved))} -> {clip(repr(mine))}"]
    changes = [f"{key} {old[key]!r} -> {new[key]!r}" for key in _MIXTURE_KEYS if old[key] != new[key]]
    names = [[source["name"] for source in parts["sources"]] for parts in (old, new)]
    if names[0] != names[1]:
        changes.append(f"sources {clip(repr(names[0]))} -> {clip(repr(names[1]))}")
    theirs = {source["name"]: source for source in old["sources"]}
    for source in new["sources"]:
        before = theirs.get(source["name"])
        if before is None:
            continue
        if not same_rows(before["rows"], source["rows"]):
            changes.append(f"source {source['name']!r} rows {clip(repr(before['rows']))} -> {source['rows']!r}"
                           f"{version_hint(before['rows'], source['rows'])}")
        if before["rows_per_epoch"] != source["rows_per_epoch"]:
            changes.append(f"source {source['name']!r} weight {before['weight']!r} -> {source['weight']!r} "
                           f"({before['rows_per_epoch']!r} -> {source['rows_per_epoch']} rows per epoch)")
    return changes


def rows_hint(saved: Any, mine: str | None) -> str:
    """For a state whose rows, `saved`, are not those `mine` names: what changed in a mixture, or the
    version to open (`version_hint`)."""
    if _mixture(saved) is None and _mixture(mine) is None:
        return version_hint(saved, mine)
    return f"; the mixture changed: {'; '.join(mixture_changes(saved, mine))}"


def same_rows(saved: Any, mine: str | None) -> bool:
    """Whether `saved` (a state's "dataset") names the rows `mine` names: equal, or equal but for the
    version (a version `compact` made of the other), or mixtures of such rows."""
    if not isinstance(saved, str) or mine is None:
        return saved is None and mine is None
    if saved == mine:
        return True
    if saved.startswith(_MIXTURE) or mine.startswith(_MIXTURE):
        return _mixture(saved) is not None and _mixture(mine) is not None and not mixture_changes(saved, mine)
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
