"""Writes one version of a small cache, and is SIGKILLed at a chosen step or moment.

Used by the crash-safety and concurrency tests. Two ways to run it:

    python crash_writer.py {local,beam} PATH --version B --first 1000 --count 600 [--kill rename:3]

writes once (importing Beam only in beam mode). With `--serve` it imports everything
once, then reads one JSON job per line on stdin and forks a writer per job, so a trial
costs a fork, not an interpreter start with Beam's imports. A job is
`{"mode", "path", "version", "first", "count", "shard_size", "kill", "kill_after", "kill_phase"}`;
the server answers `exit CODE` (or `exit killed`) once the writer is gone, or
`exit hang` after it dumped the threads of a writer stuck for HANG_SECONDS to stderr.

The writer prints `event NAME SECONDS` as it enters each phase (staging, finalize,
manifest, cleanup) and `done WRITE_ID SECONDS` at the end. It is killed with SIGKILL:

  kill_after  by the server, that many seconds after the writer enters `kill_phase`
              (default staging): a random moment, at any instruction, in any thread
  kill POINT:N  by itself on the Nth call of POINT, before the call runs:
    create     opening a file (staged shards, then the temporary files of the shard table, the
               version's header and the pointer)
    publish    the finalize step, before it touches anything
    rename     os.rename: each staged shard moved into place, then `_metadata.json`
    commit     os.link: the shard table (1), then the version file (2, the commit) created
               from their temporary files
    version    fs.create_if_absent: creating the shard table (1), then the version file (2),
               on every scheme (on an object store: the shards are in place, nothing is
               committed yet)
    manifest   writing `_metadata.json` (temporary file, then rename)
    cleanup    after `_metadata.json` is in place, before the staging is removed
    unlink     each file removed (the temporary files, the staging folder)
"""

from __future__ import annotations

import argparse
import faulthandler
import itertools
import json
import os
import select
import signal
import sys
import time
import traceback

from beam_shards import Features, Value, write as local, write_shards
from beam_shards.storage import fs
from beam_shards.versions import commit

FEATURES = Features({"id": Value("int64"), "version": Value("string"), "payload": Value("binary")})
PARTS = 4
HANG_SECONDS = 120
HANG = -1
_START = time.monotonic()


def example(i: int, version: str) -> dict:
    return {"id": i, "version": version, "payload": (f"{version}:{i}:".encode() * 40)[:240]}


def _part(part: int, first: int, count: int, version: str):
    for i in range(first + part, first + count, PARTS):
        yield example(i, version)


def _say(*words) -> None:
    # One write(2) of less than PIPE_BUF bytes: a kill cannot leave half a line.
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (" ".join([*words, f"{time.monotonic() - _START:.4f}"]) + "\n").encode())


def _hook(owner, name: str, point: str, kill: tuple[str, int] | None, event: str | None = None,
          under: str | None = None, on_event=None) -> None:
    """Wraps `owner.name`: says `event` on the first call, kills the process at the chosen call.

    With `under`, only calls whose first argument is a path under it count.
    """
    original = getattr(owner, name)
    calls = itertools.count(1)

    def wrapper(*args, **kwargs):
        if under is None or os.fspath(args[0]).startswith(under):
            n = next(calls)
            if event is not None and n == 1:
                _say("event", event)
                if on_event is not None:
                    on_event(event)
            if kill == (point, n):
                os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)


def install_hooks(path: str, kill: tuple[str, int] | None, on_event=None) -> None:
    """Hooks the steps of a write: `on_event(phase)` as each phase starts, and the chosen kill."""
    under = os.path.abspath(path)
    _hook(fs, "create", "create", kill, event="staging", on_event=on_event)
    _hook(commit, "publish", "publish", kill, event="finalize", on_event=on_event)
    local.publish = commit.publish  # imported by name, as by the sink (`_import_beam` points it here too)
    _hook(fs, "write_bytes_atomic", "manifest", kill, event="manifest", on_event=on_event)
    _hook(fs, "create_if_absent", "version", kill)
    _hook(commit, "remove_staging", "cleanup", kill, event="cleanup", on_event=on_event)
    _hook(os, "rename", "rename", kill, under=under)
    _hook(os, "link", "commit", kill, under=under)
    _hook(os, "unlink", "unlink", kill, under=under)
    os.remove = os.unlink


def parse_kill(text: str | None) -> tuple[str, int] | None:
    if not text:
        return None
    point, n = text.split(":")
    return point, int(n)


def write(mode: str, path: str, version: str, first: int, count: int, shard_size: int = 6_000) -> None:
    options = dict(shard_size_bytes=shard_size, batch_size=8)
    if mode == "local":
        examples = (example(i, version) for i in range(first, first + count))
        manifest = write_shards(examples, path, FEATURES, **options)
        _say("done", manifest.write_id)
        return
    beam, PipelineOptions, WriteToArrowShards = _import_beam()
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        (p | beam.Create(range(PARTS)) | beam.FlatMap(_part, first, count, version)
         | WriteToArrowShards(path, FEATURES, **options)
         | beam.Map(lambda manifest: _say("done", manifest.write_id)))


def _run_job(job: dict) -> int:
    """Forks a writer for `job`; kills it `kill_after` seconds into `kill_phase` if asked. Its exit status."""
    phase_r, phase_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        global _START
        _START = time.monotonic()
        os.close(phase_r)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        code = 0
        try:
            install_hooks(job["path"], parse_kill(job.get("kill")),
                          on_event=lambda phase: os.write(phase_w, f"{phase}\n".encode()))
            write(job["mode"], job["path"], job["version"], job["first"], job["count"], job.get("shard_size", 6_000))
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    os.close(phase_w)
    deadline = None
    phases = b""
    give_up = time.monotonic() + HANG_SECONDS
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            if time.monotonic() > give_up:
                print(f"writer {pid} hangs after {HANG_SECONDS}s; its threads:", file=sys.stderr, flush=True)
                os.kill(pid, signal.SIGUSR1)
                time.sleep(2)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return HANG
            if deadline is None and job.get("kill_after") is not None and select.select([phase_r], [], [], 0)[0]:
                phases += os.read(phase_r, 1024)
                if job.get("kill_phase", "staging") in phases.decode().split():
                    deadline = time.monotonic() + job["kill_after"]
            if deadline is not None and time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)  # our own child, not yet reaped: the pid cannot be reused
                return os.waitpid(pid, 0)[1]
            time.sleep(0.0002)
    finally:
        os.close(phase_r)


def _import_beam():
    """Beam, imported on first use (a local write in a process of its own does without), with the sink's
    `publish` (`beam.publishing`'s) pointing at the hooked one."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_shards import WriteToArrowShards
    from beam_shards.beam import publishing

    publishing.publish = commit.publish
    return beam, PipelineOptions, WriteToArrowShards


def serve() -> None:
    _import_beam()  # before any fork: a forked writer then costs no imports
    print("ready", flush=True)
    for line in sys.stdin:
        status = _run_job(json.loads(line))
        if status == HANG:
            print("exit hang", flush=True)
        elif os.WIFSIGNALED(status):
            print("exit killed" if os.WTERMSIG(status) == signal.SIGKILL else f"exit signal {os.WTERMSIG(status)}",
                  flush=True)
        else:
            print(f"exit {os.WEXITSTATUS(status)}", flush=True)


def main(argv: list[str]) -> None:
    if argv == ["--serve"]:
        serve()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["local", "beam"])
    parser.add_argument("path")
    parser.add_argument("--version", required=True)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=600)
    parser.add_argument("--shard-size", type=int, default=6_000)
    parser.add_argument("--kill")
    args = parser.parse_args(argv)
    install_hooks(args.path, parse_kill(args.kill))
    write(args.mode, args.path, args.version, args.first, args.count, args.shard_size)


if __name__ == "__main__":
    main(sys.argv[1:])
