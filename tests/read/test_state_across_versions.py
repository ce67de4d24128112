"""Training states across versions: valid on a version `beam-shards compact` made (the same rows in the same
order), refused on any other version (an append, an overwrite) with the version to open named."""

from __future__ import annotations

import json

import pytest

from beam_shards import CorruptCacheError, Features, ShardedDataset, ShardedSampler, Value, read_metadata, write_shards
from beam_shards.cli import main
from beam_shards.format.layout import CacheLayout
from beam_shards.format.manifest import Manifest
from beam_shards.read.row_identity import rows_name, same_rows, version_hint

torch = pytest.importorskip("torch")
from beam_shards import ShardedDataLoader  # noqa: E402  (imports torch)

pytestmark = pytest.mark.timeout(240)
FEATURES = Features({"x": Value("int64")})
ROWS = 120
BATCH = 8


def _cache(tmp_path) -> str:
    path = str(tmp_path / "cache")
    write_shards(({"x": i} for i in range(ROWS)), path, FEATURES, max_rows_per_shard=5)
    return path


def _loader(dataset: ShardedDataset) -> ShardedDataLoader:
    return ShardedDataLoader(dataset, sampler=ShardedSampler(dataset, seed=7), batch_size=BATCH)


def _interrupted(path: str, **open_options) -> tuple[list[int], list[int], dict]:
    """The whole first epoch, what a run read of it before its checkpoint, and the checkpoint."""
    whole = [int(x) for batch in _loader(ShardedDataset(path, **open_options)) for x in batch["x"]]
    loader, read = _loader(ShardedDataset(path, **open_options)), []
    for batch in loader:
        read += [int(x) for x in batch["x"]]
        if len(read) == 5 * BATCH:
            return whole, read, loader.state_dict()
    raise AssertionError("the epoch ended before the checkpoint")


def _rest(path: str, state: dict, **open_options) -> list[int]:
    loader = _loader(ShardedDataset(path, **open_options))
    loader.load_state_dict(state)
    return [int(x) for batch in loader for x in batch["x"]]


def _compact(path: str, size: str) -> int:
    assert main(["compact", path, "--shard_size", size]) == 0
    return read_metadata(path).version


def test_a_state_resumes_exactly_on_the_version_compact_made(tmp_path, capsys):
    path = _cache(tmp_path)
    whole, read, state = _interrupted(path)
    assert _compact(path, "2KB") == 2 and read_metadata(path).num_shards < ROWS // 5
    assert read + _rest(path, state) == whole, "the compacted version resumed another order"
    assert _compact(path, "1MB") == 3 and read_metadata(path).num_shards == 1  # a compact of a compact
    assert read + _rest(path, state) == whole
    assert "into version 3" in capsys.readouterr().out


def test_a_state_taken_on_the_compacted_version_resumes_on_the_one_before(tmp_path):
    path = _cache(tmp_path)
    _compact(path, "2KB")
    whole, read, state = _interrupted(path)
    assert read + _rest(path, state, version=1) == whole


@pytest.mark.parametrize("change", ["append", "overwrite"])
def test_a_state_of_another_version_is_refused_naming_the_version_to_open(tmp_path, change):
    path = _cache(tmp_path)
    _compact(path, "2KB")
    whole, read, state = _interrupted(path)  # on version 2
    rows = range(ROWS, ROWS + 10) if change == "append" else range(ROWS)  # an overwrite of the same length
    write_shards(({"x": i} for i in rows), path, FEATURES, mode=change)
    with pytest.raises(ValueError, match=r"another order: .*dataset .*the state was taken on version 2; "
                                         r"open it with ShardedDataset\(path, version=2\)"):
        _rest(path, state)
    assert read + _rest(path, state, version=2) == whole, "the version the refusal names resumes"


def test_a_state_of_another_view_of_the_same_rows_is_still_refused(tmp_path):
    path = _cache(tmp_path)
    state = ShardedSampler(ShardedDataset(path)[::-1], seed=1).state_dict()
    _compact(path, "2KB")
    with pytest.raises(ValueError, match="another order: dataset") as refused:
        ShardedSampler(ShardedDataset(path), seed=1).load_state_dict(state)
    assert "version=1" in str(refused.value)
    ShardedSampler(ShardedDataset(path)[::-1], seed=1).load_state_dict(state)


def test_compact_records_the_rows_it_keeps_and_other_writes_their_own(tmp_path):
    path = _cache(tmp_path)
    first = read_metadata(path)
    assert first.rows_id is None and first.rows_identity == first.write_id
    _compact(path, "2KB")
    compacted = read_metadata(path)
    assert compacted.rows_id == first.write_id != compacted.write_id
    write_shards(({"x": 0} for _ in range(3)), path, FEATURES, mode="append")
    appended = read_metadata(path)
    assert appended.rows_id is None and appended.rows_identity == appended.write_id


def test_a_damaged_rows_id_is_a_corrupt_cache(tmp_path):
    path = _cache(tmp_path)
    _compact(path, "2KB")
    where = CacheLayout(path).version(2)
    with open(where) as handle:
        data = json.load(handle)
    Manifest.from_dict(data, path, where)
    with pytest.raises(CorruptCacheError, match="rows id '../elsewhere'"):
        Manifest.from_dict(data | {"rows_id": "../elsewhere"}, path, where)


def test_names_of_rows_agree_on_all_but_the_version():
    mine = rows_name("w1", 2, "rows[0:10:1]", 10)
    assert same_rows(rows_name("w1", 1, "rows[0:10:1]", 10), mine)
    assert same_rows("w1 version 2, rows[0:10:1], 10 rows", mine)  # a state saved before rows ids were recorded
    assert not same_rows(rows_name("w0", 1, "rows[0:10:1]", 10), mine)
    assert not same_rows(rows_name("w1", 1, "rows[9:-1:-1]", 10), mine)
    assert not same_rows(rows_name("w1", 1, "rows[0:10:1]", 11), mine)
    assert not same_rows(None, mine) and not same_rows(mine, None) and same_rows(None, None)
    assert not same_rows({"a": 1}, mine) and not same_rows("version 2", mine)
    assert version_hint(rows_name("w0", 3, "rows[0:10:1]", 10), mine).endswith("ShardedDataset(path, version=3)")
    assert version_hint(rows_name("w0", 2, "rows[0:9:1]", 9), mine) == ""  # the same version: another view
    assert version_hint({"a": 1}, mine) == version_hint("nonsense", mine) == ""
