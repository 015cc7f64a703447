"""Regenerates the committed Python code for the .proto files.

Run `python proto/generate.py` after editing a .proto file; a test fails when
the committed code is stale. `--out DIR` writes elsewhere (the test uses it).
"""

import argparse
import pathlib
import sys

from grpc_tools import protoc

PROTO_ROOT = pathlib.Path(__file__).resolve().parent
DEFAULT_OUT = PROTO_ROOT.parent / "harness"


def generate(out: pathlib.Path) -> None:
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *sources,
    ]
    if protoc.main(args) != 0:
        sys.exit("protoc failed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    generate(parser.parse_args().out)
