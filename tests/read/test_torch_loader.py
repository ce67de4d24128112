"""ShardedDataset in a torch DataLoader with worker processes (the only place torch is imported)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from beam_shards import ShardedDataset, write_shards

from _support import FEATURES, example

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

pytestmark = pytest.mark.subprocess  # DataLoader worker processes

N = 50


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("torch") / "cache")
    write_shards((example(i) for i in range(N)), path, FEATURES, max_rows_per_shard=8, batch_size=4)
    return path


def to_float(item: dict) -> dict:
    """A picklable transform: the image as a CHW float tensor."""
    item["image"] = torch.from_numpy(np.array(item["image"], dtype=np.float32)).permute(2, 0, 1) / 255
    return item


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_with_two_workers_and_default_collate(cache, context):
    ds = ShardedDataset(cache, columns=["id", "image", "label", "embedding"], image_mode="numpy")
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=context)
    batches = list(loader)
    assert len(batches) == 13
    first = batches[0]
    assert first["image"].shape == (4, 16, 16, 3) and first["image"].dtype == torch.uint8
    assert first["embedding"].shape == (4, 8) and first["embedding"].dtype == torch.float32
    assert torch.cat([b["id"] for b in batches]).tolist() == list(range(N))
    assert torch.cat([b["label"] for b in batches]).tolist() == [i % 10 for i in range(N)]
    expected = np.stack([example(i)["embedding"] for i in range(N)])
    np.testing.assert_array_equal(torch.cat([b["embedding"] for b in batches]).numpy(), expected)


def test_dataloader_shuffled_with_a_transform_sees_each_example_once(cache):
    ds = ShardedDataset(cache, columns=["id", "image", "label"], image_mode="numpy", transform=to_float)
    loader = DataLoader(ds[5:45], batch_size=8, shuffle=True, num_workers=2,
                        generator=torch.Generator().manual_seed(0))
    ids, labels = [], []
    for batch in loader:
        assert batch["image"].shape[1:] == (3, 16, 16) and batch["image"].dtype == torch.float32
        ids += batch["id"].tolist()
        labels += batch["label"].tolist()
    assert sorted(ids) == list(range(5, 45)) and ids != list(range(5, 45))
    assert labels == [i % 10 for i in ids]


def test_the_package_never_imports_torch():
    code = ("import sys, beam_shards, beam_shards.read.dataset, beam_shards.read.backend, beam_shards.features.decode; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.timeout(600)
def test_dataloader_with_two_workers_on_an_object_store(store):
    path = store.uri("cache")
    write_shards((example(i) for i in range(N)), path, FEATURES, max_rows_per_shard=8, batch_size=4)
    ds = ShardedDataset(path, columns=["id", "label"])
    ids = [i for batch in DataLoader(ds, batch_size=5, num_workers=2) for i in batch["id"].tolist()]
    assert ids == list(range(N))
