"""Shared test helpers: pipeline options pinned to a local runner, and small examples."""

from __future__ import annotations

import datetime
import io
import threading

import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from PIL import Image as PILImage

from beam_shards import Array, ClassLabel, Features, Image, Retention, Sequence, Value
from beam_shards.format.layout import CacheLayout
from beam_shards.shards.options import WriterOptions, WrittenShard
from beam_shards.shards.writer import ShardWriter
from beam_shards.versions.gc import Garbage, collect_garbage
from beam_shards.versions.staging import staged_shards


def options(*args: str) -> PipelineOptions:
    """Pipeline options with a local runner (FnApiRunner unless `args` name another)."""
    args = list(args)
    if not any(a.startswith("--runner") for a in args):
        args.insert(0, "--runner=FnApiRunner")
    return PipelineOptions(args)


def jpeg(seed: int, size: int = 16, quality: int = 90) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    PILImage.fromarray(pixels).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def png(seed: int, size: int = 16, mode: str = "RGB") -> bytes:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = rng.integers(0, 256, (size, size, channels), dtype=np.uint8)
    buffer = io.BytesIO()
    PILImage.fromarray(pixels[:, :, 0] if channels == 1 else pixels, mode).save(buffer, format="PNG")
    return buffer.getvalue()


FEATURES = Features({
    "id": Value("int64"),
    "image": Image(),
    "label": ClassLabel(num_classes=10),
    "embedding": Array((8,), "float32"),
    "caption": Value("string"),
    "tags": Sequence(Value("string")),
})


def example(i: int, image: bytes | None = None) -> dict:
    """Example `i` of FEATURES; deterministic in `i`."""
    rng = np.random.default_rng(i)
    return {
        "id": i,
        "image": image if image is not None else jpeg(i % 7),
        "label": i % 10,
        "embedding": rng.standard_normal(8).astype(np.float32),
        "caption": f"example number {i}",
        "tags": [f"t{j}" for j in range(i % 3)],
    }


def run_with_deadline(pipeline, seconds: float = 240) -> None:
    """Runs `pipeline` and fails the test if it has not finished within `seconds`."""
    result = pipeline.run()
    state = result.wait_until_finish(duration=int(seconds * 1000))
    if state != PipelineState.DONE:
        try:
            result.cancel()
        except Exception:  # the job may be gone already; the failure below says what matters
            pass
        pytest.fail(f"pipeline did not finish within {seconds}s (state {state}); did an SDK worker fail to start?")


def clean_up(path: str) -> Garbage:
    """gc as after a killed write when no write runs (`--min_age 0`), keeping every version."""
    return collect_garbage(path, Retention(keep=1_000_000, min_age=datetime.timedelta(0)))


def race_to_create(target: str, racers: int = 8) -> list[int]:
    """Starts `racers` threads at once, each calling `fs.create_if_absent(target, b"writer N")`; the winners."""
    from beam_shards.format.layout import CacheLayout, new_write_id
    from beam_shards.storage import fs

    winners = []
    barrier = threading.Barrier(racers)

    def race(n: int):
        barrier.wait()
        if fs.create_if_absent(target, f"writer {n}".encode(), CacheLayout.temporary(target, new_write_id())):
            winners.append(n)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return winners


def stage(path: str, write_id: str, examples: list[dict], features: Features) -> list[WrittenShard]:
    """Stages `examples` as write `write_id` would, without publishing (small shards of batches of
    10); returns the staged shards."""
    writer = ShardWriter(features, staged_shards(CacheLayout(path).new_attempt(write_id)),
                         WriterOptions(shard_size_bytes=2_000, batch_size=10))
    for i, item in enumerate(examples):
        writer.add(item, i)
    return writer.close()


def digested_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each batch a deduplicating non-deterministic write digests from now on (to see that a
    bundle repeat fired)."""
    from beam_shards.beam import staged_dedup

    digested: list[int] = []
    real = staged_dedup.RowDigester.keep

    def counting(self, batch):
        digested.append(batch.num_rows)
        return real(self, batch)

    monkeypatch.setattr(staged_dedup.RowDigester, "keep", counting)
    return digested


def flip_byte(path: str, offset: int, mask: int = 0x40) -> None:
    """Flips the bits of `mask` in the byte at `offset` of the file at `path`, in place: the same file, the same size."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ mask]))
