"""Object-store settings read from the standard environment, and pyarrow filesystems built from them.

S3 takes `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (an S3-compatible server),
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` and `AWS_REGION` or
`AWS_DEFAULT_REGION`; what is unset is left to each library's own defaults. GCS takes
`STORAGE_EMULATOR_HOST` (an emulator, reached anonymously) or else default credentials.
"""

from __future__ import annotations

import dataclasses
import os

import pyarrow.fs as pafs


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """An endpoint URL split as pyarrow takes it: `host:port` and the scheme (`http`/`https`)."""

    url: str
    host: str
    scheme: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        scheme, _, host = url.rpartition("://")
        return cls(url=url if scheme else f"http://{url}", host=host.rstrip("/"), scheme=scheme or "http")


@dataclasses.dataclass(frozen=True)
class S3Settings:
    """S3 configuration from the environment; None where a variable is unset."""

    endpoint: Endpoint | None
    access_key_id: str | None
    secret_access_key: str | None
    session_token: str | None
    region: str | None

    @classmethod
    def from_env(cls) -> S3Settings:
        env = os.environ
        url = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        return cls(endpoint=Endpoint.parse(url) if url else None,
                   access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
                   secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
                   session_token=env.get("AWS_SESSION_TOKEN") or None,
                   region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None)


@dataclasses.dataclass(frozen=True)
class GcsSettings:
    """GCS configuration from the environment: the emulator's endpoint, or None for Google's."""

    emulator: Endpoint | None

    @classmethod
    def from_env(cls) -> GcsSettings:
        host = os.environ.get("STORAGE_EMULATOR_HOST")
        return cls(emulator=Endpoint.parse(host) if host else None)


# (pid, settings) -> filesystem: one per process and configuration, never pickled or
# inherited through fork (the SDKs' connection pools are not fork safe).
_pyarrow_filesystems: dict[tuple[int, object], pafs.FileSystem] = {}


def pyarrow_filesystem(scheme: str) -> pafs.FileSystem:
    """pyarrow's filesystem for `s3` or `gs`, configured from the environment, cached per process.

    Raises:
      ValueError: `scheme` is neither `s3` nor `gs`.
    """
    settings: S3Settings | GcsSettings
    if scheme == "s3":
        settings = S3Settings.from_env()
    elif scheme == "gs":
        settings = GcsSettings.from_env()
    else:
        raise ValueError(f"pyarrow serves s3:// and gs:// here, not {scheme}://")
    key = (os.getpid(), settings)
    if key not in _pyarrow_filesystems:
        _pyarrow_filesystems[key] = _make_pyarrow_filesystem(settings)
    return _pyarrow_filesystems[key]


def _make_pyarrow_filesystem(settings: S3Settings | GcsSettings) -> pafs.FileSystem:
    if isinstance(settings, GcsSettings):
        if settings.emulator is None:
            return pafs.GcsFileSystem()
        return pafs.GcsFileSystem(anonymous=True, endpoint_override=settings.emulator.host,
                                  scheme=settings.emulator.scheme)
    options: dict[str, object] = {}
    if settings.endpoint is not None:
        options.update(endpoint_override=settings.endpoint.host, scheme=settings.endpoint.scheme)
    if settings.access_key_id and settings.secret_access_key:
        options.update(access_key=settings.access_key_id, secret_key=settings.secret_access_key,
                       session_token=settings.session_token)
    if settings.region:
        options.update(region=settings.region)
    return pafs.S3FileSystem(**options)
