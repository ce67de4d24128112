"""ArrowBackend against a raw pyarrow reader of the same shards (issue 2's benchmark).

Writes the standard workload once with `write_shards`, then times, for `ArrowBackend`
and for `RawShards` (below: memory_map + ipc.open_file per shard, bisect routing over
cumulative row counts, `Table.take`): 10,000 random `get_row`, 200 random `take` of 256
indices, full scans of the record batches (5 per timed run, each from a fresh open), and
cold opens (open the cache and read one row; 20 per timed run). The two sides take
turns; prints medians over `--repeats` runs and the ratio ours/baseline. The goal is
take and scan <= 1.0x and get_row <= 1.5x. Run by hand:

    python benchmarks/bench_backend.py [--num_examples 50000] [--repeats 5]
"""

from __future__ import annotations

import bisect
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from beam_shards import ArrowBackend  # noqa: E402

import workload  # noqa: E402

NUM_GET_ROW = 10_000
NUM_TAKE = 200
TAKE_SIZE = 256
SCAN_PASSES = 5  # full scans per timed run, each from a fresh open
OPEN_PASSES = 20


class RawShards:
    """The baseline: shards read with plain pyarrow, no validation, no LRU."""

    def __init__(self, path: Path):
        header = json.loads((path / "_metadata.json").read_text())
        entries = pa.concat_tables([pa.ipc.open_file(pa.memory_map(str(path / "_tables" / table["file"]))).read_all()
                                    for table in header["tables"]])
        self._files = [str(path / name) for name in entries.column("file").to_pylist()]
        self._ends = list(itertools.accumulate(entries.column("num_rows").to_pylist()))
        self._starts = [0] + self._ends[:-1]
        self._tables: dict[int, pa.Table] = {}

    def _table(self, shard: int) -> pa.Table:
        table = self._tables.get(shard)
        if table is None:
            table = self._tables[shard] = pa.ipc.open_file(pa.memory_map(self._files[shard])).read_all()
        return table

    def get_row(self, index: int) -> dict[str, Any]:
        shard = bisect.bisect_right(self._ends, index)
        return self._table(shard).slice(index - self._starts[shard], 1).to_pylist()[0]

    def take(self, indices: list[int]) -> pa.Table:
        groups: dict[int, list[int]] = {}
        for position, index in enumerate(indices):
            groups.setdefault(bisect.bisect_right(self._ends, index), []).append(position)
        parts, order = [], []
        for shard, positions in groups.items():
            parts.append(self._table(shard).take([indices[p] - self._starts[shard] for p in positions]))
            order.extend(positions)
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[order] = np.arange(len(order))
        return pa.concat_tables(parts).take(inverse)

    def iter_batches(self):
        for file in self._files:
            reader = pa.ipc.open_file(pa.memory_map(file))
            for b in range(reader.num_record_batches):
                yield reader.get_batch(b)


def consume(batch: pa.RecordBatch) -> int:
    """Touches the labels, the embedding values and the image offsets of a batch."""
    return (pc.sum(batch.column("label")).as_py() + int(pc.sum(batch.column("embedding").flatten()).as_py())
            + pc.sum(pc.binary_length(batch.column("image"))).as_py())


def check_same(ours: ArrowBackend, base: RawShards, rng: np.random.Generator) -> None:
    """Both readers return the same rows (a sanity check, outside any timing)."""
    indices = rng.integers(0, ours.num_rows, TAKE_SIZE).tolist()
    if not ours.take(indices).equals(base.take(indices)):
        raise SystemExit("ArrowBackend.take and the baseline disagree")
    for index in indices[:20]:
        if ours.get_row(index) != base.get_row(index):
            raise SystemExit(f"ArrowBackend.get_row({index}) and the baseline disagree")


def measure(cache: Path, repeats: int) -> dict[str, tuple[float, float]]:
    """{measurement: (ours seconds, baseline seconds)}, medians over `repeats`."""
    ours, base = ArrowBackend.open(str(cache)), RawShards(cache)
    n = ours.num_rows
    check_same(ours, base, np.random.default_rng(0))
    # Indices are drawn before timing; both readers get the same ones.
    rows = [np.random.default_rng(r).integers(0, n, NUM_GET_ROW).tolist() for r in range(repeats)]
    takes = [np.random.default_rng(1000 + r).integers(0, n, (NUM_TAKE, TAKE_SIZE)).tolist() for r in range(repeats)]
    middle = n // 2

    def open_ours() -> ArrowBackend:
        return ArrowBackend.open(str(cache))

    def open_base() -> RawShards:
        return RawShards(cache)

    def scans(opener) -> None:
        for _ in range(SCAN_PASSES):
            sum(consume(batch) for batch in opener().iter_batches())

    def opens(opener) -> None:
        for _ in range(OPEN_PASSES):
            opener().get_row(middle)

    plans = {
        f"get_row x{NUM_GET_ROW:,}": (lambda r: [ours.get_row(i) for i in rows[r]],
                                      lambda r: [base.get_row(i) for i in rows[r]]),
        f"take {TAKE_SIZE} x{NUM_TAKE}": (lambda r: [ours.take(ix) for ix in takes[r]],
                                          lambda r: [base.take(ix) for ix in takes[r]]),
        f"scan x{SCAN_PASSES}": (lambda r: scans(open_ours), lambda r: scans(open_base)),
        f"open + 1 row x{OPEN_PASSES}": (lambda r: opens(open_ours), lambda r: opens(open_base)),
    }
    results = {}
    for name, (run_ours, run_base) in plans.items():
        medians = workload.alternating_medians({"ours": run_ours, "base": run_base}, repeats)
        results[name] = (medians["ours"], medians["base"])
    return results


GOALS = {"get_row": 1.5, "take": 1.0, "scan": 1.0}


def report(results: dict[str, tuple[float, float]], num_rows: int, num_shards: int, num_bytes: int,
           repeats: int) -> None:
    print(f"\nArrowBackend vs raw pyarrow: {num_rows:,} rows, {num_shards} shards, {num_bytes / 1e6:.1f} MB, "
          f"median of {repeats}")
    print(f"{'measurement':<22}{'ours':>12}{'baseline':>12}{'ours/base':>11}  goal")
    for name, (ours, base) in results.items():
        goal = GOALS.get(name.split()[0])
        verdict = "" if goal is None else f"<= {goal:.1f}x {'met' if ours / base <= goal else 'MISSED'}"
        print(f"{name:<22}{ours * 1e3:>10.1f}ms{base * 1e3:>10.1f}ms{ours / base:>10.2f}x  {verdict}")


def main(argv: list[str] | None = None) -> None:
    with workload.session(argv, __doc__.splitlines()[0], repeats=5) as (args, work, pool):
        cache = work / "backend_cache"
        manifest = workload.write_cache(cache, pool, args.num_examples, args.shard_size)
        results = measure(cache, args.repeats)
        report(results, manifest.num_rows, manifest.num_shards, manifest.num_bytes, args.repeats)


if __name__ == "__main__":
    main()
