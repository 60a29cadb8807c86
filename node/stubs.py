"""Generate the gRPC stubs in node/rpc/ from proto/*.proto, or check they are current.

The stubs are build output (ignored by git): `make setup` runs `generate`;
the unit tests run `check`, which regenerates into a scratch folder and
compares, so a stale node/rpc/ fails the suite instead of misbehaving at run time.
"""
from __future__ import annotations

import argparse
import filecmp
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
RPC_DIR = ROOT / "node" / "rpc"

# protoc writes `import common_pb2`; inside a package that must be relative.
_ABS_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


def _protoc(out: Path) -> None:
    from grpc_tools import protoc  # imported here so `check` errors clearly without grpcio-tools

    protos = sorted(str(p.name) for p in PROTO_DIR.glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files in {PROTO_DIR}")
    include = Path(protoc.__file__).parent / "_proto"
    args = ["protoc", f"-I{PROTO_DIR}", f"-I{include}",
            f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}", *protos]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed on " + ", ".join(protos))
    for f in out.glob("*_pb2*.py"):
        f.write_text(_ABS_IMPORT.sub(r"from . import \1 as \2", f.read_text()))
    names = sorted(p.stem for p in out.glob("*_pb2*.py"))
    (out / "__init__.py").write_text(
        '"""Generated from proto/*.proto by `python -m node.stubs generate`. Do not edit."""\n'
        + "".join(f"from . import {n}\n" for n in names))


def generate(dest: Path = RPC_DIR) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*_pb2*.py*"):
        old.unlink()
    _protoc(dest)


def stale_files(dest: Path = RPC_DIR) -> list[str]:
    """Names of generated files that differ from what proto/ would produce now."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        _protoc(fresh)
        want = {p.name for p in fresh.iterdir() if p.is_file()}
        have = {p.name for p in dest.iterdir() if p.is_file()} if dest.is_dir() else set()
        diff = sorted(want ^ have)
        diff += sorted(n for n in want & have if not filecmp.cmp(fresh / n, dest / n, shallow=False))
        return diff


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m node.stubs", description=__doc__)
    ap.add_argument("action", choices=["generate", "check"])
    args = ap.parse_args(argv)
    if args.action == "generate":
        generate()
        print(f"stubs generated in {RPC_DIR.relative_to(ROOT)}/")
        return 0
    stale = stale_files()
    if stale:
        print("stale or missing generated stubs: " + ", ".join(stale) + " (run `make setup`)")
        return 1
    print("stubs are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
