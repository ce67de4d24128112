"""Local servers the tests start: a free loopback port, waiting for it to listen, and stopping."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

START_SECONDS = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, name: str) -> None:
    """Returns once `process` listens on `port`; raises RuntimeError if it exits or takes over START_SECONDS."""
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with code {process.returncode} before listening on port {port}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{name} did not listen on port {port} within {START_SECONDS}s")


def stop(process: subprocess.Popen) -> None:
    """Stops a server started with `start_new_session=True`: SIGTERM to its group, then SIGKILL."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass
