"""What a cluster run relies on: the master left to spark-submit, the --py-files bundle, URI helpers."""
from __future__ import annotations

import zipfile

import pytest

from spark_analysis.bundle import write_bundle
from spark_analysis.session import QUICK_JVM_ENV, QUICK_JVM_OPTIONS, default_master, driver_java_options
from spark_analysis.storage import is_local, scheme
from node.errors import UserError


def test_default_master_follows_spark_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert default_master() == "local[*]"
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40123")  # what spark-submit hands its Python driver
    assert default_master() is None


@pytest.mark.parametrize("value,quick", [(None, False), ("0", False), ("", False), ("1", True)])
def test_quick_jvm_flags_only_when_asked(monkeypatch: pytest.MonkeyPatch, value: str | None, quick: bool) -> None:
    if value is None:
        monkeypatch.delenv(QUICK_JVM_ENV, raising=False)
    else:
        monkeypatch.setenv(QUICK_JVM_ENV, value)
    options = driver_java_options()
    assert options.startswith("-Dlog4j2.configurationFile=file:")
    assert options.endswith(" " + QUICK_JVM_OPTIONS) is quick and ("-XX:" in options) is quick


def test_bundle_holds_package_and_the_two_repo_modules(tmp_path) -> None:
    z = zipfile.ZipFile(write_bundle(tmp_path / "a.zip"))
    names = set(z.namelist())
    assert {"spark_analysis/__main__.py", "spark_analysis/pcap_parser.py", "spark_analysis/submit_entry.py",
            "node/schema.py", "node/__init__.py", "node/errors.py"} <= names
    assert not any(n.startswith(("testbed/experiment", "node/daemon")) for n in names)
    with pytest.raises(UserError):
        write_bundle(tmp_path)


@pytest.mark.parametrize("uri,sch,local", [("runs/x", "", True), ("/abs/x", "", True), ("file:///x", "file", True),
                                           ("hdfs://nn:8020/x", "hdfs", False), ("S3A://b/x", "s3a", False)])
def test_scheme(uri: str, sch: str, local: bool) -> None:
    assert scheme(uri) == sch and is_local(uri) is local


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_bad_chunk_size_is_exit_2(tmp_path, capsys, value: str) -> None:
    from spark_analysis.__main__ import main

    assert main(["report", str(tmp_path), "--chunk-mb", value]) == 2
    assert "--chunk-mb" in capsys.readouterr().err
