"""Store errors (denied, throttled, unreachable) reach users as beam_shards errors naming the URI, never tracebacks.

The S3 server is reached through a proxy on 127.0.0.1 (`_stores.FaultyProxy`) that answers
chosen requests with 403 AccessDenied or 503 SlowDown, as a bucket policy or a busy store
would; each test asserts that the proxy really refused a request.
"""

from __future__ import annotations

import importlib
import threading
import time

import pytest

from beam_shards import ArrowBackend, Features, ShardedDataset, StoreAccessError, Value, read_metadata, write_shards
from beam_shards.cli.commands import main as cli
from beam_shards.storage import store_errors

pytestmark = pytest.mark.timeout(120)

FEATURES = Features({"id": Value("int64"), "text": Value("string")})


def _cache(store) -> str:
    path = store.uri("cache")
    write_shards(({"id": i, "text": f"row {i}"} for i in range(50)), path, FEATURES, max_rows_per_shard=20,
                 retention=None)
    return path


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(store_errors, "FIRST_DELAY_SECONDS", 0.01)


def test_a_denied_manifest_is_a_store_access_error_naming_it(faulty_s3):
    store, proxy = faulty_s3
    path = _cache(store)
    proxy.refuse("_metadata.json")
    for call in (lambda: read_metadata(path), lambda: ArrowBackend.open(path), lambda: ShardedDataset(path)):
        with pytest.raises(StoreAccessError, match=r"cannot read s3://.*/cache/_metadata.json: the store denied "
                                                   r"access .*check the credentials"):
            call()
    assert proxy.refused >= 3


def test_a_denied_shard_is_a_store_access_error_naming_the_shard_not_a_corrupt_cache(faulty_s3):
    store, proxy = faulty_s3
    path = _cache(store)
    backend = ArrowBackend.open(path)
    proxy.refuse("/shard-")
    with pytest.raises(StoreAccessError, match=r"shard-.*\.arrow: the store denied access"):
        backend.get_row(0)
    assert proxy.refused >= 1


def test_a_denied_shard_table_is_a_store_access_error_naming_it(faulty_s3):
    store, proxy = faulty_s3
    path = _cache(store)
    backend = ArrowBackend.open(path)  # reads the header alone: the shard table is read on the first row
    proxy.refuse("/_tables/")
    with pytest.raises(StoreAccessError, match=r"_tables/.*\.arrow: the store denied access"):
        backend.get_row(0)
    assert proxy.refused >= 1


def test_the_cli_prints_one_line_for_a_denied_cache(faulty_s3, capsys):
    store, proxy = faulty_s3
    path = _cache(store)
    proxy.refuse("_metadata.json")
    for command in (["head", path], ["info", path], ["verify", path], ["log", path]):
        assert cli(command) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("beam-shards: cannot ") and "denied" in err and "\n" not in err, err
    assert proxy.refused >= 4


def test_a_store_that_throttles_a_few_times_is_read_after_backing_off(faulty_s3):
    store, proxy = faulty_s3
    path = _cache(store)
    proxy.refuse("_metadata.json", 503, "SlowDown", times=store_errors.ATTEMPTS - 1)
    assert read_metadata(path).num_rows == 50
    assert proxy.refused == store_errors.ATTEMPTS - 1


def test_a_store_that_keeps_throttling_is_a_clear_error(faulty_s3):
    store, proxy = faulty_s3
    path = _cache(store)
    proxy.refuse("_metadata.json", 503, "SlowDown")
    with pytest.raises(StoreAccessError, match="_metadata.json: the store throttled every attempt .*try again later"):
        read_metadata(path)
    assert proxy.refused >= store_errors.ATTEMPTS


def test_a_shard_throttled_a_few_times_is_read(faulty_s3):
    store, proxy = faulty_s3
    path = _cache(store)
    backend = ArrowBackend.open(path)
    proxy.refuse(".arrow", 503, "SlowDown", times=3)
    assert backend.get_row(0)["id"] == 0
    assert proxy.refused == 3


@pytest.mark.parametrize("error, expected", [
    (OSError("AWS Error ACCESS_DENIED during HeadObject operation"), "denied"),
    (OSError("AWS Error SLOW_DOWN during GetObject operation"), "throttled"),
    (OSError("AWS Error NETWORK_CONNECTION during GetObject: Could not connect"), "unreachable"),
    (FileNotFoundError("gone"), "missing"),
    (OSError("disk full"), None),
    (ValueError("not a store's error"), None),
])
def test_kind_reads_each_clients_errors(error, expected):
    assert store_errors.kind(error) == expected


def test_kind_reads_botocore_client_errors():
    botocore = pytest.importorskip("botocore.exceptions")

    def client_error(code: str, status: int):
        return botocore.ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Get")

    assert store_errors.kind(client_error("AccessDenied", 403)) == "denied"
    assert store_errors.kind(client_error("NoSuchKey", 404)) == "missing"
    assert store_errors.kind(client_error("SlowDown", 503)) == "throttled"
    assert store_errors.kind(botocore.EndpointConnectionError(endpoint_url="http://127.0.0.1:1")) == "unreachable"


@pytest.mark.parametrize("error", [
    OSError("cannot read s3://b/c/_versions/00000000000000000503.json: Broken pipe"),
    OSError("cannot read s3://b/c/403.json: Broken pipe"),
])
def test_a_number_in_a_path_is_no_http_status(error):
    assert store_errors.kind(error) is None


def test_an_error_raised_while_handling_a_missing_object_is_not_missing():
    try:
        try:
            raise FileNotFoundError("gone")
        except FileNotFoundError:
            raise RuntimeError("a bug in a client")
    except RuntimeError as error:
        assert store_errors.kind(error) is None


def test_an_open_and_its_first_row_make_three_metadata_requests_whatever_the_history(faulty_s3):
    """The header, a look for the next version (absent), the shard table; then the shard alone."""
    store, proxy = faulty_s3
    path = _cache(store)
    for n in range(5):
        write_shards([{"id": 100 + n, "text": "more"}], path, FEATURES, mode="append", retention=None)
    proxy.requests.clear()
    backend = ArrowBackend.open(path)
    assert len(proxy.requests) == 2, proxy.requests
    assert backend.get_row(0)["id"] == 0
    metadata = [r for r in proxy.requests if "/shard-" not in r[1]]
    assert len(metadata) == 3 and "/_tables/" in metadata[2][1], proxy.requests


def test_verify_on_a_store_checks_shards_concurrently(faulty_s3, monkeypatch):
    verifying = importlib.import_module("beam_shards.versions.verification")

    store, _ = faulty_s3
    path = _cache(store)
    threads, real = set(), verifying.check_shard
    monkeypatch.setattr(verifying, "check_shard", lambda manifest, shard_id: threads.add(threading.get_ident())
                        or (time.sleep(0.2), real(manifest, shard_id))[1])
    report = verifying.verify(path)
    assert report.ok and report.shards_checked == 3 and len(threads) == 3, (report, threads)
