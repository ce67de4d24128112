"""What `flink_install` hands the Flink tests is whole: the job server jar, a Flink distribution, and Java.

`test_flink_install` runs this module without them: a module of the Flink tests' own that
imports no pipeline, so that check costs the fixture's verdict and little else."""

from __future__ import annotations

import shutil
import zipfile

from install_flink import FLINK_VERSION


def test_the_install_holds_the_job_server_flink_and_java(flink_install):
    assert zipfile.is_zipfile(flink_install.job_server_jar), flink_install.job_server_jar
    home = flink_install.flink_home
    assert (home / "bin" / "start-cluster.sh").is_file() and (home / "lib" / f"flink-dist-{FLINK_VERSION}.jar").is_file()
    assert shutil.which("java")
