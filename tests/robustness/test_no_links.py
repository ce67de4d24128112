"""No write, rename or delete follows a link (issue 35): every new local file is created exclusively
without following a link (`local_files.create_new`), and the disk cache's folder is its user's alone.

The review's case: the disk cache's temporary download name, planted as a symbolic link, made a reader
overwrite the link's target with shard bytes, so a root process on a shared `cache_dir` could be made
to overwrite any file.
"""

from __future__ import annotations

import io
import os
import stat
import threading
import warnings
import zlib

import pytest

from beam_shards import ArrowBackend, CacheError, Features, ShardedDataset, Value, write_shards
from beam_shards.format.layout import CacheLayout, new_write_id
from beam_shards.storage import disk_cache, fs, local_files
from beam_shards.storage.checksum import format_checksum
from beam_shards.storage.disk_cache import DiskCache

pytestmark = pytest.mark.timeout(60)

DATA = bytes(range(256)) * 40
URI = "s3://bucket/cache/shard-20260101T000000Z-0000000a-00000-of-00001.arrow"
KEY = format_checksum(zlib.crc32(DATA))
VICTIM = b"a file the cache must never write\n"


class Fetcher:
    """A `fetch` serving DATA that counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self) -> io.BytesIO:
        self.calls += 1
        return io.BytesIO(DATA)


def victim(tmp_path) -> str:
    """A file outside the cache folder that a planted link points at."""
    path = tmp_path / "victim"
    path.write_bytes(VICTIM)
    return str(path)


def final_path(cache: DiskCache) -> str:
    return os.path.join(cache.cache_dir, disk_cache._file_name(URI, KEY, len(DATA)))


def read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def plant(kind: str, where: str, target: str) -> None:
    if kind == "symbolic link":
        os.symlink(target, where)
    elif kind == "dangling link":
        os.symlink(target + ".absent", where)
    else:
        os.link(target, where)


PLANTED = ["symbolic link", "dangling link", "hard link"]


def test_a_link_planted_at_the_old_download_name_is_never_written_through(tmp_path):
    """The review's case: the name a download used to take (`.tmp-<pid>-<thread id>`) is a link to a victim."""
    cache = DiskCache(str(tmp_path / "cache"), max_bytes=1 << 20)
    os.makedirs(cache.cache_dir, mode=0o700)
    target = victim(tmp_path)
    os.symlink(target, f"{final_path(cache)}.tmp-{os.getpid()}-{threading.get_ident()}")
    path = cache.get(URI, KEY, len(DATA), Fetcher())
    assert read(target) == VICTIM, "the download was written through the planted link"
    assert path == final_path(cache) and read(path) == DATA and not os.path.islink(path)


@pytest.mark.parametrize("kind", PLANTED)
def test_a_download_name_taken_is_refused_and_the_read_goes_to_the_store(tmp_path, monkeypatch, kind):
    """Even a planted name a download does pick (random names make that unforeseeable) is never written through."""
    cache = DiskCache(str(tmp_path / "cache"), max_bytes=1 << 20)
    os.makedirs(cache.cache_dir, mode=0o700)
    target, planted = victim(tmp_path), final_path(cache) + ".tmp-1-planted"
    plant(kind, planted, target)
    monkeypatch.setattr(disk_cache, "_temporary_name", lambda path: planted)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.get(URI, KEY, len(DATA), Fetcher()) is None
    assert [str(w.message) for w in caught] and "File exists" in str(caught[0].message), caught
    assert read(target) == VICTIM and not os.path.exists(target + ".absent")
    assert os.path.lexists(planted) and not os.path.exists(final_path(cache))


def test_a_link_at_a_complete_name_is_replaced_not_followed(tmp_path):
    """A link where a complete file should be is served never, marked used never, and replaced by a download."""
    cache = DiskCache(str(tmp_path / "cache"), max_bytes=1 << 20)
    os.makedirs(cache.cache_dir, mode=0o700)
    outside = tmp_path / "outside"
    outside.write_bytes(DATA)  # the right bytes, elsewhere
    os.utime(outside, ns=(10**9, 10**9))
    os.symlink(outside, final_path(cache))
    fetcher = Fetcher()
    path = cache.get(URI, KEY, len(DATA), fetcher)
    assert fetcher.calls == 1 and not os.path.islink(path) and read(path) == DATA
    assert outside.stat().st_mtime_ns == 10**9 and read(str(outside)) == DATA


def test_a_lock_file_planted_as_a_link_is_not_written_through(tmp_path):
    cache = DiskCache(str(tmp_path / "cache"), max_bytes=1 << 20)
    os.makedirs(cache.cache_dir, mode=0o700)
    target = victim(tmp_path)
    os.symlink(target, final_path(cache) + ".lock")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        cache.get(URI, KEY, len(DATA), Fetcher())
    assert read(target) == VICTIM


@pytest.mark.parametrize("kind", PLANTED + ["file"])
def test_create_new_refuses_any_name_already_there(tmp_path, kind):
    target, where = victim(tmp_path), str(tmp_path / "new")
    if kind == "file":
        with open(where, "wb") as handle:
            handle.write(VICTIM)
    else:
        plant(kind, where, target)
    with pytest.raises(FileExistsError) as raised:
        local_files.create_new(where)
    assert raised.value.filename == where
    assert read(target) == VICTIM and not os.path.exists(target + ".absent")


def test_every_local_write_goes_through_create_new(tmp_path):
    """Manifests, shard tables and the pointer are written through a temporary: a link planted at one is refused."""
    target, path = victim(tmp_path), str(tmp_path / "cache" / "_versions" / "1.json")
    temporary = CacheLayout.temporary(path, new_write_id())
    os.makedirs(os.path.dirname(path))
    os.symlink(target, temporary)
    with pytest.raises(FileExistsError):
        fs.create_if_absent(path, b"{}", temporary)
    with pytest.raises(FileExistsError):
        fs.write_bytes_atomic(path, b"{}", temporary)
    with pytest.raises(FileExistsError):
        fs.create(temporary).close()
    assert read(target) == VICTIM and not os.path.exists(path)


# ---- the disk cache's folder is its user's alone -------------------------------------------------

def small_cache(tmp_path) -> str:
    path = str(tmp_path / "data")
    write_shards([{"x": i} for i in range(5)], path, Features({"x": Value("int64")}))
    return path


def test_the_cache_folder_is_made_private(tmp_path):
    folder = tmp_path / "made" / "cache"
    cache = DiskCache(str(folder), max_bytes=1 << 20)
    old = os.umask(0)
    try:
        assert read(cache.get(URI, KEY, len(DATA), Fetcher())) == DATA
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_private_folder_made_before_is_used(tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o755)  # as earlier releases made it: others may read, not write
    os.chmod(folder, 0o755)
    assert read(DiskCache(str(folder), max_bytes=1 << 20).get(URI, KEY, len(DATA), Fetcher())) == DATA


def refused(folder, *words: str) -> None:
    """DiskCache, ArrowBackend.open and ShardedDataset refuse `folder` with one line naming it and `words`."""
    cache_path = small_cache(folder.parent / "source")
    for open_with in (lambda: DiskCache(str(folder), max_bytes=1 << 20),
                      lambda: ArrowBackend.open(cache_path, cache_dir=str(folder)),
                      lambda: ShardedDataset(cache_path, cache_dir=str(folder))):
        with pytest.raises(CacheError) as raised:
            open_with()
        message = str(raised.value)
        assert "\n" not in message and f"disk cache folder {folder} " in message
        for word in words:
            assert word in message, message


def test_a_cache_folder_that_is_a_link_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    refused(link, "symbolic link", f"pass the folder itself, {real}")


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o1777, 0o722], ids=oct)
def test_a_cache_folder_others_may_write_is_refused(tmp_path, mode):
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, mode)
    refused(folder, f"mode 0{mode:o}", f"chmod 700 {folder}", "cache_dir of your own")


def test_a_cache_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    owner = folder.stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # this process runs as another user
    refused(folder, f"belongs to user id {owner}", f"not to this user ({owner + 1})", "cache_dir of your own")


def test_a_cache_folder_that_is_a_file_is_refused(tmp_path):
    folder = tmp_path / "file"
    folder.write_bytes(b"")
    refused(folder, "not a folder")


def test_a_link_planted_where_the_folder_is_to_be_made_is_refused_at_the_download(tmp_path):
    """The folder is checked before each download too: one planted after the cache was opened is refused."""
    folder = tmp_path / "later"
    cache = DiskCache(str(folder), max_bytes=1 << 20)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    folder.symlink_to(elsewhere)
    with pytest.raises(CacheError, match="is a symbolic link"):
        cache.get(URI, KEY, len(DATA), Fetcher())
    assert os.listdir(elsewhere) == []
