"""The project installs, imports, and its generated stubs match proto/."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("package", ["testbed", "node", "spark_analysis", "node.rpc", "node.schema"])
def test_package_imports(package: str) -> None:
    importlib.import_module(package)


def test_generated_stubs_are_current() -> None:
    from node import stubs

    assert stubs.stale_files() == [], "run `make setup` to regenerate node/rpc from proto/"


def test_stale_stub_is_detected(tmp_path: Path) -> None:
    from node import stubs

    stubs.generate(tmp_path)
    (tmp_path / "link_pb2.py").write_text("# edited by hand\n")
    assert "link_pb2.py" in stubs.stale_files(tmp_path)


def test_stubs_define_the_services() -> None:
    from node.rpc import control_pb2_grpc, link_pb2_grpc, submit_pb2_grpc

    assert hasattr(link_pb2_grpc, "LinkServicer")
    assert hasattr(submit_pb2_grpc, "SubmitServicer")
    assert hasattr(control_pb2_grpc, "ControlServicer")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=ROOT)


def test_testbed_help_lists_command_groups() -> None:
    out = _cli("--help")
    assert out.returncode == 0
    for command in ("run", "up", "down", "status", "exec", "link", "clean", "send", "mailbox", "image"):
        assert command in out.stdout


def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    # in this process: one interpreter per subcommand cost ~20 s, and `--help` exits inside argument parsing,
    # before main() sets up logging or runs a handler, so the in-process run is the command's own
    from testbed.cli import build_parser, main

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert len(sub.choices) > 10
    for name in sub.choices:
        with pytest.raises(SystemExit) as exited:
            main([name, "--help"])
        out = capsys.readouterr()
        assert exited.value.code in (0, None), f"`testbed {name} --help` failed: {out.err}"
        assert "usage:" in out.out, f"`testbed {name} --help` printed no usage"


def test_spark_analysis_help() -> None:
    out = subprocess.run([sys.executable, "-m", "spark_analysis", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0
    assert "report" in out.stdout


def test_schema_rejects_bad_records() -> None:
    from node import schema

    good = {"ts": 1.0, "node": "n1", "msg_id": "m", "src": "n0", "dst": "n1", "size": 10, "fragments": 1,
            "mode": "fragmenting", "submit_ts": 0.5, "deliver_ts": 1.0, "hops": 1}
    assert schema.validate("delivery", good) == []
    assert any("size" in p for p in schema.validate("delivery", {**good, "size": "ten"}))
    assert any("hops" in p for p in schema.validate("delivery", {k: v for k, v in good.items() if k != "hops"}))
    assert any("bool" in p for p in schema.validate("delivery", {**good, "fragments": True}))
