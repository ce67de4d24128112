"""Files and folders on a local disk made without following a link: every new file the package writes
is created here, exclusively, and the disk cache's folder is checked to be its user's alone.

A name someone else planted where a file is about to be written (a symbolic link to another file, or a
hard link) would make the writer write through it: a process with more rights than the planter (root, a
shared service account) could be made to overwrite any file. `create_new` refuses any name that is already
taken instead (O_EXCL), and never resolves a link in its last component (O_NOFOLLOW); a writer picks
names no other run uses, so an existing name is never its own. Renames and deletes act on the name
itself, never on a link's target (POSIX rename and unlink), so they need no such care.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from beam_shards.errors import CacheError

_CREATE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                 | getattr(os, "O_BINARY", 0))
_PRIVATE_MODE = 0o700


def create_new(path: str) -> BinaryIO:
    """A new, empty file at local `path`, open for writing; nothing may be at `path` yet.

    Raises:
      FileExistsError: something is at `path` already: a file, a folder or a link (dangling or not),
        never written through; the error names the path.
      OSError: the file cannot be created (its folder is missing, no permission, ...).
    """
    return os.fdopen(os.open(path, _CREATE_FLAGS, 0o666), "wb")


def private_folder(path: str, *, create: bool) -> None:
    """Checks that local folder `path` is its user's alone (made with mode 0700 when `create` and absent).

    A folder that is a link, belongs to another user, or that others may write to is refused: anyone
    else who can write in it could plant links or files where this process writes, or serves from.

    Raises:
      CacheError: `path` is a link, not a folder, another user's, or writable by its group or others;
        the message names it and the fix.
      OSError: with `create`, it cannot be made or looked at (without, such a folder passes: it is
        checked again when it is to be made).
    """
    if create:
        os.makedirs(path, mode=_PRIVATE_MODE, exist_ok=True)
    try:
        info = os.lstat(path)
    except OSError:
        if create:
            raise
        return
    own = f"pass a cache_dir of your own (beam_shards makes it with mode 0{_PRIVATE_MODE:o})"
    if stat.S_ISLNK(info.st_mode):
        raise CacheError(f"the disk cache folder {path} is a symbolic link (to {os.readlink(path)}), which "
                         f"beam_shards never writes through: pass the folder itself, {os.path.realpath(path)}, if "
                         f"it is yours, or {own}")
    if not stat.S_ISDIR(info.st_mode):
        raise CacheError(f"the disk cache folder {path} is not a folder; {own}")
    user = os.geteuid() if hasattr(os, "geteuid") else info.st_uid
    if info.st_uid != user:
        raise CacheError(f"the disk cache folder {path} belongs to user id {info.st_uid}, not to this user "
                         f"({user}), who could then be served or made to write its files: {own}")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheError(f"the disk cache folder {path} may be written by other users (mode "
                         f"0{stat.S_IMODE(info.st_mode):o}), who could plant files where shards are written: make "
                         f"it private (chmod 700 {path}) or {own}")
