"""Object-store calls that Beam's FileSystems has no form for, through the clients Beam builds.

- A first look at a bucket, once per process and configuration, that fails at once
  with an error naming the URI when there are no credentials, no such bucket, or no
  answer from the endpoint (Beam would retry such calls for minutes).
- A create that fails when the object exists: S3's `PutObject` with `If-None-Match: *`
  and GCS's upload with `ifGenerationMatch=0`, so two writers can never both create it.
- A read of a whole object in one request, so an object replaced meanwhile (the
  `_metadata.json` pointer) is read old or new, never torn: Beam's reader asks for
  ranges of the size it saw first.
- GCS deletes one object per request: Beam's GCS delete and rename send batch
  requests, which some GCS-compatible servers (fake-gcs-server) do not serve.

The clients are configured exactly as Beam's FileSystems configure theirs: from the
pipeline's options inside a pipeline, from the environment outside one (`stores`).
"""

from __future__ import annotations

import concurrent.futures
import errno
import os
import time

from beam_shards.errors import FileTooLargeError, StoreAccessError
from beam_shards.storage import stores

STORE_SCHEMES = ("s3", "gs")  # the object stores these calls serve
# S3 answers 409 while another conditional write of the key is in flight; AWS asks
# for a retry, which then meets the winner's object (412) or creates it.
_S3_CONFLICT_ATTEMPTS = 5
_S3_CONFLICT_DELAY_SECONDS = 0.2
# GCS deletes run concurrently: each is one request.
_GCS_DELETE_THREADS = 16
# The first look at a bucket: one attempt, and no longer than this to connect / to answer.
_CHECK_TIMEOUTS_SECONDS = (10, 60)
# (pid, scheme, bucket, configuration) of the buckets that answered.
_checked: set[tuple] = set()


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.split("://", 1)[1].partition("/")
    return bucket, key


def check_store(path: str) -> None:
    """Looks at the bucket of an `s3://` or `gs://` path once per process and configuration.

    Other schemes are not looked at. A bucket that exists but may not be listed with
    the credentials at hand passes: its objects may still be readable.

    Raises:
      StoreAccessError: no credentials, no such bucket, or the endpoint does not answer;
        the error names `path`.
    """
    scheme = path.split("://", 1)[0]
    if scheme not in STORE_SCHEMES:
        return
    bucket, _ = _split(path)
    arguments = stores.s3_client_arguments() if scheme == "s3" else {}
    settings = stores.S3Settings.from_env() if scheme == "s3" else stores.GcsSettings.from_env()
    key = (os.getpid(), scheme, bucket, settings, tuple(sorted(arguments.items())))
    if key in _checked:
        return
    if scheme == "s3":
        _check_s3(path, bucket, arguments)
    else:
        _check_gcs(path, bucket)
    _checked.add(key)


def _check_s3(path: str, bucket: str, arguments: dict) -> None:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    connect, read = _CHECK_TIMEOUTS_SECONDS
    config = Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=connect, read_timeout=read)
    client = boto3.session.Session().client("s3", config=config, **arguments)
    try:
        client.head_bucket(Bucket=bucket)
    except NoCredentialsError:
        raise StoreAccessError(
            f"no AWS credentials for {path}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or "
            "give a pipeline --s3_access_key_id and --s3_secret_access_key") from None
    except ClientError as error:
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404:
            raise StoreAccessError(f"there is no bucket {bucket!r} for {path}") from None
        if status != 403:  # 403: these credentials may not list the bucket; its objects may still be used
            raise StoreAccessError(f"S3 refused to look at bucket {bucket!r} for {path}: {error}") from None
    except BotoCoreError as error:  # the endpoint does not answer, or answers what is not S3
        raise StoreAccessError(f"cannot reach S3 ({client.meta.endpoint_url}) for {path}: {error}") from None


def _check_gcs(path: str, bucket: str) -> None:
    import requests
    from google.api_core import exceptions
    from google.auth.exceptions import GoogleAuthError

    try:
        stores.gcs_client().get_bucket(bucket, timeout=_CHECK_TIMEOUTS_SECONDS, retry=None)
    except exceptions.NotFound:
        raise StoreAccessError(f"there is no bucket {bucket!r} for {path}") from None
    except exceptions.Unauthorized:
        raise StoreAccessError(
            f"no Google Cloud credentials for {path}: set GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth "
            "application-default login` (or set STORAGE_EMULATOR_HOST for an emulator)") from None
    except exceptions.Forbidden:
        pass  # these credentials may not look at the bucket; its objects may still be used
    except (requests.exceptions.RequestException, GoogleAuthError, exceptions.GoogleAPIError) as error:
        endpoint = stores.GcsSettings.from_env().emulator
        raise StoreAccessError(f"cannot reach GCS ({endpoint.url if endpoint else 'Google'}) for {path}: "
                               f"{error}") from None


def create_if_absent(path: str, data: bytes) -> bool:
    """Writes the object `path` only if none is there; returns whether this call created it.

    Raises:
      ValueError: `path` is neither `s3://` nor `gs://`.
    """
    return _for_scheme(path, "conditional creates", _s3_create_if_absent, _gcs_create_if_absent)(path, data)


def _for_scheme(path: str, what: str, s3, gs):
    """`s3` or `gs`, whichever serves the scheme of `path`."""
    scheme = path.split("://", 1)[0]
    if scheme not in STORE_SCHEMES:
        raise ValueError(f"{what} serve {STORE_SCHEMES}, not {path!r}")
    return s3 if scheme == "s3" else gs


def _s3_create_if_absent(path: str, data: bytes) -> bool:
    from botocore.exceptions import ClientError

    client = stores.s3_client()
    bucket, key = _split(path)
    attempt = 0
    while True:
        try:
            client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*",
                              ContentType="application/octet-stream")
            return True
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            if code == "PreconditionFailed":
                return False
            attempt += 1
            if code != "ConditionalRequestConflict" or attempt == _S3_CONFLICT_ATTEMPTS:
                raise
            time.sleep(_S3_CONFLICT_DELAY_SECONDS * attempt)


def read_object(path: str, limit: int | None = None) -> bytes:
    """The whole content of the object `path`, from one version of it.

    Raises:
      FileNotFoundError: there is no such object.
      FileTooLargeError: it holds more than `limit` bytes (nothing of it is read).
      ValueError: `path` is neither `s3://` nor `gs://`.
    """
    return _for_scheme(path, "whole-object reads", _s3_read_object, _gcs_read_object)(path, limit)


def _too_large(path: str, size: int, limit: int | None) -> None:
    if limit is not None and size > limit:
        raise FileTooLargeError(errno.EFBIG, f"{size:,} bytes, more than {limit:,}", path)


def _s3_read_object(path: str, limit: int | None) -> bytes:
    from botocore.exceptions import ClientError

    check_store(path)
    client = stores.s3_client()
    bucket, key = _split(path)
    try:
        response = client.get_object(Bucket=bucket, Key=key)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            raise FileNotFoundError(errno.ENOENT, "no such object", path) from None
        raise
    with response["Body"] as body:
        _too_large(path, response["ContentLength"], limit)
        return body.read()


def _gcs_read_object(path: str, limit: int | None) -> bytes:
    from google.api_core.exceptions import NotFound, RequestRangeNotSatisfiable

    check_store(path)
    bucket, key = _split(path)
    # One request, so one generation of the object; asking for no more than `limit + 1` bytes
    # tells a too-large object without downloading it.
    try:
        data = stores.gcs_client().bucket(bucket).blob(key).download_as_bytes(end=limit)
    except NotFound:
        raise FileNotFoundError(errno.ENOENT, "no such object", path) from None
    except RequestRangeNotSatisfiable:  # the answer to a range read of an empty object
        data = b""
    if limit is not None and len(data) > limit:
        raise FileTooLargeError(errno.EFBIG, f"more than {limit:,} bytes", path)
    return data


def _gcs_create_if_absent(path: str, data: bytes) -> bool:
    from google.api_core.exceptions import PreconditionFailed

    bucket, key = _split(path)
    blob = stores.gcs_client().bucket(bucket).blob(key)
    try:
        blob.upload_from_string(data, content_type="application/octet-stream", if_generation_match=0)
    except PreconditionFailed:
        return False
    return True


def gcs_delete(paths: list[str]) -> None:
    """Deletes `gs://` objects one request each (absent ones are ignored)."""
    from google.api_core.exceptions import NotFound

    client = stores.gcs_client()

    def delete(path: str) -> None:
        bucket, key = _split(path)
        try:
            client.bucket(bucket).delete_blob(key)
        except NotFound:
            pass

    with concurrent.futures.ThreadPoolExecutor(min(_GCS_DELETE_THREADS, max(len(paths), 1))) as pool:
        list(pool.map(delete, paths))
