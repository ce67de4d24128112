"""The coders of record batches and tables: Arrow IPC bytes, a size estimate without encoding, and
registered wherever the sink's or the source's module is imported, worker processes included."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam import coders
from apache_beam.testing.util import assert_that, equal_to

from beam_shards.beam.arrow_coder import RecordBatchCoder, TableCoder

from _support import options


def _batch(first: int, rows: int = 100) -> pa.RecordBatch:
    return pa.record_batch({
        "id": pa.array(range(first, first + rows), pa.int64()),
        "text": pa.array([f"row {i}" for i in range(first, first + rows)], pa.large_string()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(4 * rows, dtype=np.float32)), 4),
    }, metadata={b"origin": b"test"})


def test_batches_and_tables_come_back_equal_from_ipc_bytes_never_a_pickle():
    batch = _batch(7).slice(10, 50)
    encoded = RecordBatchCoder().encode(batch)
    assert encoded[:4] == b"\xff\xff\xff\xff", "an Arrow IPC stream starts with a continuation marker"
    decoded = RecordBatchCoder().decode(encoded)
    assert decoded.equals(batch) and decoded.schema.equals(batch.schema, check_metadata=True)
    table = pa.Table.from_batches([_batch(0), _batch(100)])
    assert TableCoder().decode(TableCoder().encode(table)).equals(table)


def test_size_is_estimated_from_the_buffers_without_encoding(monkeypatch):
    batch = _batch(0, 1000)
    coder = RecordBatchCoder()
    monkeypatch.setattr(RecordBatchCoder, "encode", lambda self, value: pytest.fail("estimating encoded the batch"))
    assert coder.get_impl().estimate_size(batch) == batch.nbytes
    assert batch.nbytes > 0.9 * pa.ipc.get_record_batch_size(batch)


def test_registered_for_a_pcollection_of_batches_in_this_process():
    def batches(first: int) -> Iterator[pa.RecordBatch]:
        yield _batch(first)

    p = beam.Pipeline(options=options())
    made = p | beam.Create([0]) | beam.FlatMap(batches).with_output_types(pa.RecordBatch)
    assert made.element_type is pa.RecordBatch
    assert isinstance(coders.registry.get_coder(made.element_type), RecordBatchCoder)
    assert isinstance(coders.registry.get_coder(pa.Table), TableCoder)


@pytest.mark.parametrize("module", ["beam_shards.beam.sink", "beam_shards.beam.source"])
@pytest.mark.timeout(120)
def test_importing_a_transform_module_registers_the_coders(module):
    """A worker process imports the module of the transforms it runs: that alone registers them."""
    code = (f"import {module}, pyarrow as pa; from apache_beam import coders; "
            "print(type(coders.registry.get_coder(pa.RecordBatch)).__name__, "
            "type(coders.registry.get_coder(pa.Table)).__name__)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=110)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["RecordBatchCoder", "TableCoder"]


def _keyed(batch: pa.RecordBatch) -> tuple[int, pa.RecordBatch]:
    return batch.column("id")[0].as_py() % 2, batch


def _ids_of_group(group: tuple[int, list[pa.RecordBatch]]) -> list[int]:
    return [i for batch in group[1] for i in batch.column("id").to_pylist()]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_batches_cross_a_shuffle_between_worker_processes_in_the_coder():
    """Batches grouped by key are encoded by the coder in one SDK worker process and decoded in another."""
    def batches(first: int) -> Iterator[pa.RecordBatch]:
        yield _batch(first)

    p = beam.Pipeline(options=options("--direct_num_workers=2", "--direct_running_mode=multi_processing"))
    keyed = (p | beam.Create([0, 100, 200, 300]) | beam.FlatMap(batches)
             | beam.Map(_keyed).with_output_types(tuple[int, pa.RecordBatch]))
    value_coder = coders.registry.get_coder(keyed.element_type).value_coder()
    assert isinstance(value_coder, RecordBatchCoder)
    ids = keyed | beam.GroupByKey() | beam.FlatMap(_ids_of_group)
    assert_that(ids, equal_to(list(range(400))))
    p.run().wait_until_finish()
