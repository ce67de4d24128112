"""Store calls read Beam's options once per options object: every open of a shard checks its
bucket, and reading all of Beam's options parses its argument list again (about 20 ms)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from beam_shards import ArrowBackend, Features, Value, write_shards

from _stores import BUCKET

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_reading_every_shard_of_a_cache_reads_the_options_at_most_once(store, monkeypatch):
    from apache_beam.options.pipeline_options import PipelineOptions

    path = store.uri("cache")
    write_shards(({"id": i} for i in range(60)), path, Features({"id": Value("int64")}), max_rows_per_shard=5)
    reads = []
    real = PipelineOptions.get_all_options
    monkeypatch.setattr(PipelineOptions, "get_all_options", lambda self, *a, **k: reads.append(1) or real(self, *a, **k))
    backend = ArrowBackend.open(path)
    assert backend.slice(0, backend.num_rows).column("id").to_pylist() == list(range(60))
    assert backend.num_shards >= 12, "the cache has the many shards this is about"
    assert len(reads) <= 1, f"Beam's options were read {len(reads)} times"


@pytest.mark.parametrize("store", ["s3", "gs"], indirect=True)
def test_a_reader_in_a_process_without_beam_reads_the_store_without_importing_it(store, tmp_path):
    # Importing Beam cost a training reader 1-3 s, 100 MB and a full garbage collection of its objects
    # in the middle of its first reads (warm disk-cache random reads at 0.36x local disk's).
    path = store.uri("cache")
    write_shards(({"id": i} for i in range(60)), path, Features({"id": Value("int64")}), max_rows_per_shard=7)
    script = ("import sys, traceback\n"
              "class ShowWhoImportsBeam:\n"
              "    def find_spec(self, name, *args):\n"
              "        if name == 'apache_beam': traceback.print_stack()\n"
              "sys.meta_path.insert(0, ShowWhoImportsBeam())\n"
              "from beam_shards import ShardedDataset\n"
              f"ds = ShardedDataset({path!r}, cache_dir={str(tmp_path / 'disk_cache')!r})\n"
              "ids = [ds[i]['id'] for i in range(len(ds))]\n"
              "assert ids == list(range(60)), ids\n"
              f"assert ShardedDataset({path!r})[59]['id'] == 59\n"
              "print(sorted(name for name in sys.modules if name.split('.')[0] == 'apache_beam'))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stderr[:6000]


def test_a_gcs_client_without_beam_takes_default_credentials_or_goes_anonymous(monkeypatch, caplog):
    import google.auth
    from google.auth.credentials import AnonymousCredentials
    from google.auth.exceptions import DefaultCredentialsError

    from beam_shards.storage import stores

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setattr(google.auth, "default", lambda scopes: (AnonymousCredentials(), "a-project"))
    client = stores._gcs_client_from_env(stores.GcsSettings.from_env())
    assert client.project == "a-project"

    tries = []

    def no_credentials(scopes):
        tries.append(scopes)
        raise DefaultCredentialsError("none here")

    monkeypatch.setattr(google.auth, "default", no_credentials)
    monkeypatch.setattr(stores, "_CREDENTIAL_WAIT_SECONDS", 0.01)
    client = stores._gcs_client_from_env(stores.GcsSettings.from_env())
    assert client.project is None and isinstance(client._credentials, AnonymousCredentials)
    assert len(tries) == stores._CREDENTIAL_ATTEMPTS, "a metadata server may answer late: asked again first"
    assert "no Google default credentials (none here)" in caplog.text


def test_a_gcs_client_without_beam_reaches_an_emulator_named_without_a_scheme(gcs_server, monkeypatch):
    from beam_shards.storage import stores

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.endpoint.removeprefix("http://"))
    client = stores._gcs_client_from_env(stores.GcsSettings.from_env())
    assert client.lookup_bucket(BUCKET) is not None


@pytest.mark.parametrize("env", [{}, {"AWS_ENDPOINT_URL": "127.0.0.1:9", "AWS_DEFAULT_REGION": "eu-west-1"},
                                 {"AWS_ENDPOINT_URL_S3": "https://s3.example:443", "AWS_ENDPOINT_URL": "http://other:1",
                                  "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b", "AWS_SESSION_TOKEN": "t",
                                  "AWS_REGION": "us-east-2", "AWS_DEFAULT_REGION": "eu-west-1"}],
                         ids=["nothing set", "an endpoint without its scheme", "every variable"])
def test_a_reader_without_beam_builds_the_s3_client_beam_would_from_the_same_environment(env, monkeypatch):
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_shards.storage import stores

    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                 "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = stores.S3Settings.from_env()
    assert settings.client_arguments() == stores.s3_arguments(PipelineOptions(settings.beam_flags()))
