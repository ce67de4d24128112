"""A Beam FileSystem with object-store semantics, for testing the gs:// and s3:// code paths.

`fakeobj://name` maps to a local folder, but behaves like GCS: there are no folders
(`exists` is false for a prefix, deleting a prefix deletes nothing), rename is a copy
then a delete (not atomic), and a written object appears only when its stream closes.
Beam registers every FileSystem subclass it can see, so importing this module is enough.
"""

from __future__ import annotations

import io
import os
import posixpath
import shutil

from apache_beam.io.filesystem import BeamIOError, CompressionTypes, FileMetadata, FileSystem

ROOT_ENV = "FAKE_OBJECT_STORE_ROOT"


class _ObjectWriter(io.BufferedWriter):
    """Writes to a hidden temporary file and publishes the object on close."""

    def __init__(self, target: str):
        self._target = target
        self._temp = f"{target}.uploading"
        os.makedirs(os.path.dirname(target), exist_ok=True)
        super().__init__(io.FileIO(self._temp, "w"))

    def close(self) -> None:
        if not self.closed:
            super().close()
            os.replace(self._temp, self._target)


class FakeObjectStore(FileSystem):
    """GCS-like semantics over a local folder (see the module docstring)."""

    @classmethod
    def scheme(cls) -> str:
        return "fakeobj"

    @staticmethod
    def _local(path: str) -> str:
        root = os.environ[ROOT_ENV]
        return os.path.join(root, path[len("fakeobj://"):])

    @staticmethod
    def _uri(local: str) -> str:
        return "fakeobj://" + os.path.relpath(local, os.environ[ROOT_ENV]).replace(os.sep, "/")

    def join(self, basepath: str, *paths: str) -> str:
        return posixpath.join(basepath, *paths)

    def split(self, path: str) -> tuple[str, str]:
        head, tail = path.rstrip("/").rsplit("/", 1)
        return head, tail

    def mkdirs(self, path: str) -> None:
        pass

    def has_dirs(self) -> bool:
        return False

    def _list(self, dir_or_prefix: str):
        root = os.environ[ROOT_ENV]
        for folder, _, files in os.walk(root):
            for name in files:
                local = os.path.join(folder, name)
                uri = self._uri(local)
                if uri.startswith(dir_or_prefix) and not name.endswith(".uploading"):
                    yield FileMetadata(uri, os.path.getsize(local), os.path.getmtime(local))

    def create(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        return _ObjectWriter(self._local(path))

    def open(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        return open(self._local(path), "rb")

    def copy(self, source_file_names, destination_file_names):
        for source, destination in zip(source_file_names, destination_file_names):
            os.makedirs(os.path.dirname(self._local(destination)), exist_ok=True)
            shutil.copyfile(self._local(source), self._local(destination))

    def rename(self, source_file_names, destination_file_names):
        self.copy(source_file_names, destination_file_names)
        for source in source_file_names:
            os.remove(self._local(source))

    def exists(self, path: str) -> bool:
        return os.path.isfile(self._local(path))

    def size(self, path: str) -> int:
        return os.path.getsize(self._local(path))

    def last_updated(self, path: str) -> float:
        return os.path.getmtime(self._local(path))

    def checksum(self, path: str) -> str:
        return str(self.size(path))

    def metadata(self, path: str) -> FileMetadata:
        return FileMetadata(path, self.size(path), self.last_updated(path))

    def delete(self, paths) -> None:
        missing = {}
        for path in paths:
            if path.endswith("/"):
                for meta in list(self._list(path)):
                    os.remove(self._local(meta.path))
            elif os.path.isfile(self._local(path)):
                os.remove(self._local(path))
            else:
                missing[path] = FileNotFoundError(path)
        if missing:
            raise BeamIOError("Delete operation failed", missing)
