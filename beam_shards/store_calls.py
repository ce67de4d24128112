"""Object-store calls that Beam's FileSystems has no form for, through the clients Beam builds.

- A create that fails when the object exists: S3's `PutObject` with `If-None-Match: *`
  and GCS's upload with `ifGenerationMatch=0`, so two writers can never both create it.
- GCS deletes one object per request: Beam's GCS delete and rename send batch
  requests, which some GCS-compatible servers (fake-gcs-server) do not serve.

The clients are configured exactly as Beam's FileSystems configure theirs: from the
pipeline's options inside a pipeline, from the environment outside one (`stores`).
"""

from __future__ import annotations

import concurrent.futures
import time

from beam_shards import stores

CONDITIONAL_SCHEMES = ("s3", "gs")
# S3 answers 409 while another conditional write of the key is in flight; AWS asks
# for a retry, which then meets the winner's object (412) or creates it.
_S3_CONFLICT_ATTEMPTS = 5
_S3_CONFLICT_DELAY_SECONDS = 0.2
# GCS deletes run concurrently: each is one request.
_GCS_DELETE_THREADS = 16


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.split("://", 1)[1].partition("/")
    return bucket, key


def create_if_absent(path: str, data: bytes) -> bool:
    """Writes the object `path` only if none is there; returns whether this call created it.

    Raises:
      ValueError: `path` is neither `s3://` nor `gs://`.
    """
    scheme = path.split("://", 1)[0]
    if scheme == "s3":
        return _s3_create_if_absent(path, data)
    if scheme == "gs":
        return _gcs_create_if_absent(path, data)
    raise ValueError(f"conditional create serves {CONDITIONAL_SCHEMES}, not {path!r}")


def _s3_create_if_absent(path: str, data: bytes) -> bool:
    from apache_beam.io.aws.clients.s3 import boto3_client
    from botocore.exceptions import ClientError

    client = boto3_client.Client(options=stores.beam_options() or {}).client
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


def _gcs_client():
    from apache_beam.io.gcp import gcsio

    return gcsio.GcsIO(pipeline_options=stores.beam_options() or None).client


def _gcs_create_if_absent(path: str, data: bytes) -> bool:
    from google.api_core.exceptions import PreconditionFailed

    bucket, key = _split(path)
    blob = _gcs_client().bucket(bucket).blob(key)
    try:
        blob.upload_from_string(data, content_type="application/octet-stream", if_generation_match=0)
    except PreconditionFailed:
        return False
    return True


def gcs_delete(paths: list[str]) -> None:
    """Deletes `gs://` objects one request each (absent ones are ignored)."""
    from google.api_core.exceptions import NotFound

    client = _gcs_client()

    def delete(path: str) -> None:
        bucket, key = _split(path)
        try:
            client.bucket(bucket).delete_blob(key)
        except NotFound:
            pass

    with concurrent.futures.ThreadPoolExecutor(min(_GCS_DELETE_THREADS, max(len(paths), 1))) as pool:
        list(pool.map(delete, paths))
