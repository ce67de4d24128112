"""Flips one byte of a shard at each given position and reports what a reader makes of it.

    python flip_scan.py CACHE SHARD_INDEX POSITION...

For every position the byte is inverted in a scratch copy of the cache, and a
forked child opens it with `ArrowBackend`, reads every row (slice and reversed take),
compares them with the intact rows, then runs `verify`. A child that dies is
reported with its signal, so a flip that crashes the reader (SIGSEGV, SIGBUS) shows
up as a result instead of killing the scan. Prints one JSON object: position ->
{"read": "same" | "wrong" | "corrupt" | "error: TYPE: MESSAGE" | "crash: SIGNAL",
 "verify": true when verify reported a problem}.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile

from beam_shards import ArrowBackend, CorruptCacheError, read_metadata, verify


def _rows(path: str) -> tuple[list, list]:
    backend = ArrowBackend.open(path)
    forward = backend.slice(0, backend.num_rows).to_pylist()
    backward = backend.take(list(range(backend.num_rows - 1, -1, -1))).to_pylist()[::-1]
    return forward, backward


def _read_outcome(path: str, expected: list) -> str:
    try:
        forward, backward = _rows(path)
    except CorruptCacheError:
        return "corrupt"
    except Exception as error:  # what the scan looks for: anything but a clear CorruptCacheError
        return f"error: {type(error).__name__}: {str(error)[:120]}"
    return "same" if forward == expected and backward == expected else "wrong"


def _in_child(path: str, expected: list) -> dict:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        outcome = {"read": _read_outcome(path, expected)}
        try:
            outcome["verify"] = not verify(path).ok
        except Exception as error:  # reported, not raised: the parent compares
            outcome["verify"] = f"error: {type(error).__name__}: {str(error)[:120]}"
        os.write(write, json.dumps(outcome).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return {"read": f"crash: {signal.Signals(os.WTERMSIG(status)).name}", "verify": None}
    return json.loads(data)


def main(argv: list[str]) -> None:
    cache, shard_index, positions = argv[0], int(argv[1]), [int(p) for p in argv[2:]]
    expected = _rows(cache)[0]
    with tempfile.TemporaryDirectory() as scratch:
        copy = os.path.join(scratch, "cache")
        shutil.copytree(cache, copy)
        shard = read_metadata(copy).shard_path(shard_index)
        with open(shard, "rb") as handle:
            intact = handle.read()
        results = {}
        for position in positions:
            damaged = bytearray(intact)
            damaged[position] ^= 0xFF
            with open(shard, "wb") as handle:
                handle.write(damaged)
            results[position] = _in_child(copy, expected)
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
