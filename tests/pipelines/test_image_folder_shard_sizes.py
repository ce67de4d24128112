"""An image folder of rows just under half the shard size, in classes of odd counts, is written in
shards of two rows (one alone at most), never three: what a deterministic `--shard_size 1MiB` run
over ~510 KB images once did (1,532,594 bytes)."""

from __future__ import annotations

import pytest

from beam_shards import read_metadata
from beam_shards.shards.merge import is_small
from pipelines import image_folder

from _support import png

pytestmark = pytest.mark.timeout(300)

TARGET = 64 << 10


@pytest.mark.parametrize("flags", [[], ["--no_deterministic"]], ids=["deterministic", "bundled"])
def test_rows_near_half_the_shard_size_make_shards_within_it(tmp_path, flags):
    counts = {"ant": 7, "bee": 5, "cow": 9, "dog": 1}
    for name, count in counts.items():
        (tmp_path / "in" / name).mkdir(parents=True)
        for i in range(count):  # noise does not compress: ~30 KB a PNG, two rows and a file's overhead fit
            (tmp_path / "in" / name / f"{i}.png").write_bytes(png(100 * len(name) + i, size=100))
    output = str(tmp_path / "out")
    image_folder.run(["--input", str(tmp_path / "in"), "--output", output, "--shard_size", str(TARGET),
                      "--runner=FnApiRunner", "--progress", "0", *flags])
    manifest = read_metadata(output)
    sizes = [shard.num_bytes for shard in manifest.shards]
    assert manifest.num_rows == sum(counts.values())
    assert max(sizes) <= TARGET, sizes
    assert sum(is_small(size, TARGET) for size in sizes) <= 1, sizes
    assert max(shard.num_rows for shard in manifest.shards) == 2, [shard.num_rows for shard in manifest.shards]
