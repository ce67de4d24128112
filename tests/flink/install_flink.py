"""Installs what the Flink tests run on into a cache folder outside the repository; run again, it does nothing.

    python tests/flink/install_flink.py      # prints where it put each part and what it cost

- The Beam Flink job server (`--flink_job_server_jar`). Maven Central, as this project's
  machines reach it, serves no `beam-runners-flink-<flink>-job-server` jar of any version,
  but it serves `beam-runners-flink-1.19` 2.62.0 with every dependency (2.70.0 lacks
  `beam-runners-java-job-service`), and that artifact holds the job server's main class.
  So Maven copies it and its runtime dependencies into `lib/`, and `job-server.jar` holds
  only a manifest naming the main class and `lib/` as its class path: `java -jar` runs it
  as it runs Beam's shaded jar. The Python SDK does not check the job server's version.
- A Flink distribution (FLINK_HOME) of the same minor version, from PyPI: the wheel
  `apache-flink` gives `bin/` and `conf/`, the sdist `apache-flink-libraries` gives `lib/`
  (flink-dist and log4j). They are downloaded with `pip download --no-deps` and unpacked,
  never installed: they pin an old apache-beam and pyarrow.

Each part is built in a temporary folder beside its place and renamed into it when whole,
so a run that stopped half-way leaves nothing that looks installed. The cache folder is
$BEAM_SHARDS_FLINK_CACHE, by default ~/.cache/beam_shards_flink; Maven keeps its own
downloads in ~/.m2 as usual.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

FLINK_MINOR = "1.19"
FLINK_VERSION = "1.19.3"
BEAM_JOB_SERVER_VERSION = "2.62.0"
JOB_SERVER_ARTIFACTS = (f"org.apache.beam:beam-runners-flink-{FLINK_MINOR}:{BEAM_JOB_SERVER_VERSION}",
                        "org.slf4j:slf4j-simple:1.7.30")   # the job server's log lines, on its stderr
JOB_SERVER_MAIN = "org.apache.beam.runners.flink.FlinkJobServerDriver"
# The wheel's scripts and configuration are the same for every platform; this one is taken everywhere.
FLINK_WHEEL_TAGS = ("--only-binary=:all:", "--python-version=3.11", "--implementation=cp",
                    "--platform=manylinux2014_x86_64")


def cache_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("BEAM_SHARDS_FLINK_CACHE") or pathlib.Path.home() / ".cache" / "beam_shards_flink")


def job_server_jar() -> pathlib.Path:
    return cache_dir() / f"beam-runners-flink-{FLINK_MINOR}-job-server-{BEAM_JOB_SERVER_VERSION}" / "job-server.jar"


def flink_home() -> pathlib.Path:
    return cache_dir() / f"flink-{FLINK_VERSION}"


def install() -> None:
    """Installs the job server and FLINK_HOME unless they are there; prints each part's place and cost."""
    for name, place, build in (("Beam Flink job server", job_server_jar().parent, _build_job_server),
                               ("Flink distribution", flink_home(), _build_flink_home)):
        if place.is_dir():
            print(f"{name}: {place} (already installed)")
            continue
        place.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=place.parent, prefix=f".{place.name}-") as work:
            build(pathlib.Path(work) / "out", pathlib.Path(work))
            os.replace(pathlib.Path(work) / "out", place)
        print(f"{name}: {place} ({_megabytes(place):.0f} MB, in {time.monotonic() - started:.0f}s)")


def _build_job_server(out: pathlib.Path, work: pathlib.Path) -> None:
    if shutil.which("mvn") is None:
        raise SystemExit("mvn not found: the Beam Flink job server is fetched with Maven (apt-get install maven)")
    dependencies = "".join(
        f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version>"
        "</dependency>" for group, artifact, version in (coordinate.split(":") for coordinate in JOB_SERVER_ARTIFACTS))
    (work / "pom.xml").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>beam_shards.tests</groupId><artifactId>flink-job-server</artifactId><version>1</version>"
        f"<dependencies>{dependencies}</dependencies></project>")
    out.mkdir()
    _run(["mvn", "-B", "-q", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
          f"-DoutputDirectory={out / 'lib'}", "-DincludeScope=runtime"])
    jars = sorted(path.name for path in (out / "lib").glob("*.jar"))
    manifest = [b"Manifest-Version: 1.0", _manifest_line(f"Main-Class: {JOB_SERVER_MAIN}"),
                _manifest_line("Class-Path: " + " ".join(f"lib/{jar}" for jar in jars)), b"", b""]
    with zipfile.ZipFile(out / job_server_jar().name, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", b"\r\n".join(manifest))


def _manifest_line(line: str) -> bytes:
    """A manifest line folded as the jar format wants: 72 bytes a line, continuations start with a space."""
    data = line.encode()
    pieces = [data[:72]] + [b" " + data[i:i + 71] for i in range(72, len(data), 71)]
    return b"\r\n".join(pieces)


def _build_flink_home(out: pathlib.Path, work: pathlib.Path) -> None:
    downloads = work / "downloads"
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(downloads)]
    _run([*pip, *FLINK_WHEEL_TAGS, f"apache-flink=={FLINK_VERSION}"])
    _run([*pip, "--no-binary=:all:", f"apache-flink-libraries=={FLINK_VERSION}"])
    (wheel,) = downloads.glob("apache_flink-*.whl")
    (libraries,) = downloads.glob("apache-flink-libraries-*.tar.gz")
    out.mkdir()
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            top, _, rest = member.removeprefix("pyflink/").partition("/")
            if member.startswith("pyflink/") and top in ("bin", "conf") and rest and not member.endswith("/"):
                target = out / top / rest
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(member))
                if top == "bin":
                    target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    with tarfile.open(libraries) as archive:
        for member in archive.getmembers():
            parts = member.name.split("/")
            if member.isfile() and parts[1:2] == ["deps"] and parts[2:3] in (["lib"], ["bin"]):
                member.name = "/".join(parts[2:])
                archive.extract(member, out, filter="data")
    missing = [name for name in ("bin/start-cluster.sh", "bin/bash-java-utils.jar", "conf/config.yaml",
                                 f"lib/flink-dist-{FLINK_VERSION}.jar") if not (out / name).is_file()]
    if missing:
        raise SystemExit(f"the Flink {FLINK_VERSION} wheels unpacked without {', '.join(missing)}")


def _run(command: list[str]) -> None:
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} exited with {result.returncode}:\n{result.stdout[-4000:]}")


def _megabytes(place: pathlib.Path) -> float:
    return sum(path.stat().st_size for path in place.rglob("*") if path.is_file()) / 1e6


if __name__ == "__main__":
    install()
