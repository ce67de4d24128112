"""Object-store configuration: settings from the standard environment, for pyarrow's filesystems and Beam's.

Beam's FileSystems get options from the environment outside a pipeline (a pipeline's
own options stay), and Beam's S3 filesystem reuses its boto3 clients. A process that has
not imported Beam (a training reader) makes its S3 and GCS clients from the environment
itself, as Beam would outside a pipeline, and never imports it to read s3:// or gs://.

S3 takes `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (an S3-compatible server),
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` and `AWS_REGION` or
`AWS_DEFAULT_REGION`, and a pipeline's `--s3_*` options over them (Beam's S3 filesystem
and pyarrow's alike); what is unset is left to each library's own defaults. GCS takes
`STORAGE_EMULATOR_HOST` (an emulator, reached anonymously) or else default credentials.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
import types
import weakref
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

if TYPE_CHECKING:
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions


@dataclasses.dataclass(frozen=True)
class _Endpoint:
    """An endpoint URL split as pyarrow takes it: `host:port` and the scheme (`http`/`https`)."""

    url: str
    host: str
    scheme: str

    @classmethod
    def parse(cls, url: str) -> _Endpoint:
        scheme, _, host = url.rpartition("://")
        return cls(url=url if scheme else f"http://{url}", host=host.rstrip("/"), scheme=scheme or "http")


@dataclasses.dataclass(frozen=True)
class S3Settings:
    """S3 configuration from the environment; None where a variable is unset."""

    endpoint: _Endpoint | None
    access_key_id: str | None
    secret_access_key: str | None
    session_token: str | None
    region: str | None

    @classmethod
    def from_env(cls) -> S3Settings:
        env = os.environ
        url = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        return cls(endpoint=_Endpoint.parse(url) if url else None,
                   access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
                   secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
                   session_token=env.get("AWS_SESSION_TOKEN") or None,
                   region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None)

    def with_arguments(self, arguments: dict) -> S3Settings:
        """These settings with those of `s3_arguments` that are set in their place."""
        url = arguments.get("endpoint_url")
        given = {"endpoint": _Endpoint.parse(url) if url else None,
                 "access_key_id": arguments.get("aws_access_key_id"),
                 "secret_access_key": arguments.get("aws_secret_access_key"),
                 "session_token": arguments.get("aws_session_token"), "region": arguments.get("region_name")}
        return dataclasses.replace(self, **{name: value for name, value in given.items() if value})

    def client_arguments(self) -> dict:
        """The S3 client's arguments these settings give, as `s3_arguments` gives them from the Beam
        options built of them (`beam_flags`): SSL on, certificates verified as boto3 does by default."""
        return {"endpoint_url": self.endpoint.url if self.endpoint else None, "region_name": self.region,
                "aws_access_key_id": self.access_key_id, "aws_secret_access_key": self.secret_access_key,
                "aws_session_token": self.session_token, "use_ssl": True, "verify": None, "api_version": None}

    def beam_flags(self) -> list[str]:
        """Beam's `--s3_*` pipeline options for the variables that are set."""
        values = {"s3_endpoint_url": self.endpoint.url if self.endpoint else None,
                  "s3_access_key_id": self.access_key_id, "s3_secret_access_key": self.secret_access_key,
                  "s3_session_token": self.session_token, "s3_region_name": self.region}
        return [f"--{name}={value}" for name, value in values.items() if value is not None]


@dataclasses.dataclass(frozen=True)
class GcsSettings:
    """GCS configuration from the environment: the emulator's endpoint, or None for Google's."""

    emulator: _Endpoint | None

    @classmethod
    def from_env(cls) -> GcsSettings:
        host = os.environ.get("STORAGE_EMULATOR_HOST")
        return cls(emulator=_Endpoint.parse(host) if host else None)


# (pid, settings) -> filesystem: one per process and configuration, never pickled or
# inherited through fork (the SDKs' connection pools are not fork safe).
_pyarrow_filesystems: dict[tuple[int, object], pafs.FileSystem] = {}


def pyarrow_filesystem(scheme: str) -> pafs.FileSystem:
    """pyarrow's filesystem for `s3` or `gs`, configured from the environment, cached per process.

    S3 takes a pipeline's `--s3_*` options over the environment, as Beam's S3 filesystem
    does: on a cluster's workers they may be all there is.

    Raises:
      ValueError: `scheme` is neither `s3` nor `gs`.
    """
    settings: S3Settings | GcsSettings
    if scheme == "s3":
        settings = S3Settings.from_env().with_arguments(s3_client_arguments())
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


# settings -> the options built from them, so that options set from an older
# environment can be told apart from a pipeline's own (and replaced).
_env_options: dict[S3Settings, PipelineOptions] = {}


def _options_from_env() -> PipelineOptions:
    from apache_beam.options.pipeline_options import PipelineOptions

    settings = S3Settings.from_env()
    if settings not in _env_options:
        _env_options[settings] = PipelineOptions(settings.beam_flags())
    return _env_options[settings]


def beam_filesystems() -> type[FileSystems]:
    """Beam's FileSystems, given options from the environment when no pipeline set any.

    A `Pipeline` (and an SDK worker) hands its options to FileSystems; outside one
    there are none, and Beam's S3 filesystem refuses to work without them. Options a
    pipeline set are never replaced; options taken from the environment follow it.
    Only S3 needs them: Beam's GCS client finds `STORAGE_EMULATOR_HOST` or default
    credentials by itself.
    """
    from apache_beam.io.filesystems import FileSystems

    _share_boto3_clients()
    current = FileSystems._pipeline_options  # Beam keeps no public getter for it
    if current is None or any(current is built for built in _env_options.values()):
        FileSystems.set_options(_options_from_env())
    return FileSystems


def beam_options() -> PipelineOptions:
    """The options Beam's FileSystems build their clients from: a pipeline's, or the environment's."""
    return beam_filesystems()._pipeline_options


def s3_client_arguments() -> dict:
    """The arguments S3 clients are built with: from a pipeline's options when Beam runs in this process
    (`s3_arguments`), else from the environment, as Beam's FileSystems would take them outside a
    pipeline, without importing Beam (a reader in a training process then never pays its import,
    its memory, or the garbage collection of its objects)."""
    if "apache_beam" in sys.modules:
        return s3_arguments(beam_options())
    return S3Settings.from_env().client_arguments()


def s3_client() -> Any:
    """A boto3 S3 client of `s3_client_arguments`, as Beam's S3 filesystem builds it, and shared with it:
    one per process and configuration (`_Boto3WithSharedClients`)."""
    return _shared_boto3().client(service_name="s3", **s3_client_arguments())


def gcs_client() -> Any:
    """A google-cloud-storage client: Beam's (`GcsIO`, from a pipeline's options) when Beam runs in this
    process; else one made from the environment as Beam makes it outside a pipeline, without importing
    Beam: the emulator of `STORAGE_EMULATOR_HOST` anonymously, else Google's with the default
    credentials, or anonymously when there are none. One per process and configuration."""
    if "apache_beam" in sys.modules:
        from apache_beam.io.gcp import gcsio

        return gcsio.GcsIO(pipeline_options=beam_options()).client
    key = (os.getpid(), GcsSettings.from_env())
    if key not in _gcs_clients:  # two threads may both make one: either serves
        _gcs_clients[key] = _gcs_client_from_env(key[1])
    return _gcs_clients[key]


_gcs_clients: dict[tuple[int, GcsSettings], Any] = {}


def _gcs_client_from_env(settings: GcsSettings) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    if settings.emulator is not None:  # its URL as pyarrow's filesystem takes it (a bare host:port gets http)
        return storage.Client(project="<none>", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": settings.emulator.url})
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    for attempt in range(_CREDENTIAL_ATTEMPTS):
        try:
            credentials, project = google.auth.default(scopes=storage.Client.SCOPE)
            return storage.Client(credentials=credentials, project=project)
        except DefaultCredentialsError as error:  # a metadata server may answer late, as Beam retries for
            if attempt + 1 < _CREDENTIAL_ATTEMPTS:
                time.sleep(_CREDENTIAL_WAIT_SECONDS * 2 ** attempt)
                continue
            logging.getLogger(__name__).warning("no Google default credentials (%s); reading gs:// anonymously",
                                                error)
    return storage.Client.create_anonymous_client()


# google.auth.default's tries before a reader goes anonymous, and the first wait between them (doubling).
_CREDENTIAL_ATTEMPTS, _CREDENTIAL_WAIT_SECONDS = 3, 0.5


def _shared_boto3() -> _Boto3WithSharedClients:
    global _SHARED
    if _SHARED is None:
        import boto3

        _SHARED = _Boto3WithSharedClients(boto3)
    return _SHARED


# options -> the S3 client's arguments from them: reading all options parses Beam's
# argument list again (about 20 ms), and every store call checks its bucket.
_arguments_of: weakref.WeakKeyDictionary[PipelineOptions, dict] = weakref.WeakKeyDictionary()


def s3_arguments(options: PipelineOptions) -> dict:
    """The arguments Beam's S3 client is built with from `options` (read once per options:
    FileSystems is given new options, never changed ones)."""
    if options not in _arguments_of:
        values = options.get_all_options()
        _arguments_of[options] = {
            "endpoint_url": values.get("s3_endpoint_url"), "region_name": values.get("s3_region_name"),
            "aws_access_key_id": values.get("s3_access_key_id"),
            "aws_secret_access_key": values.get("s3_secret_access_key"),
            "aws_session_token": values.get("s3_session_token"), "use_ssl": not values.get("s3_disable_ssl"),
            "verify": values.get("s3_verify"), "api_version": values.get("s3_api_version")}
    return _arguments_of[options]


class _Boto3WithSharedClients:
    """What Beam's S3 client module sees as `boto3`: one boto3 client per configuration and process.

    Beam builds a new boto3 session and client for every FileSystems call on s3://,
    and each parses botocore's service model again (0.1 to 0.4 s a call). boto3
    clients are thread safe; one is kept per process, per argument Beam passes and
    per S3 environment (which fills in what the arguments leave out).
    """

    def __init__(self, boto3):
        self._boto3 = boto3
        self._clients: dict[tuple, object] = {}
        self._lock, self._lock_pid = threading.Lock(), os.getpid()
        self.session = types.SimpleNamespace(Session=lambda: self)

    def client(self, **arguments):
        pid = os.getpid()
        if self._lock_pid != pid:  # forked while another thread may have held it
            self._lock, self._lock_pid = threading.Lock(), pid
        key = (pid, S3Settings.from_env(), tuple(sorted(arguments.items())))
        with self._lock:
            if key not in self._clients:
                self._clients[key] = self._boto3.session.Session().client(**arguments)
            return self._clients[key]

    def __getattr__(self, name: str):
        return getattr(self._boto3, name)


_SHARED: _Boto3WithSharedClients | None = None  # the clients of this process, Beam's and `s3_client`'s


def _share_boto3_clients() -> None:
    """Makes Beam's S3 filesystem reuse boto3 clients, those `s3_client` gives too (see
    `_Boto3WithSharedClients`); once per process."""
    from apache_beam.io.aws.clients.s3 import boto3_client

    if boto3_client.boto3 is not None and not isinstance(boto3_client.boto3, _Boto3WithSharedClients):
        boto3_client.boto3 = _shared_boto3()
