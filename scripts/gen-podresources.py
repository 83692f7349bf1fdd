#!/usr/bin/env python3
"""Generate the Python modules for the kubelet PodResources v1 proto.

    .venv/bin/python scripts/gen-podresources.py            rewrite them in place
    .venv/bin/python scripts/gen-podresources.py --out DIR  write them under DIR

Uses grpcio-tools and mypy-protobuf at the versions pinned in pyproject's test
extra, so the same proto always gives the same files; a test regenerates them
and compares with the committed ones. Run from anywhere: paths are taken from
the repository root this script lives in.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO = Path("gpu_exporter/attribution/podresources_v1/api.proto")
# What protoc writes for the proto, beside it.
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")


def generate(out: Path) -> list[Path]:
    """Write the generated modules under ``out`` (same relative layout as in
    the repository); return their paths."""
    bindir = Path(sys.executable).parent  # protoc-gen-mypy lives beside this Python
    with tempfile.TemporaryDirectory() as scratch:
        # protoc keeps the proto's path relative to -I in the descriptor and in
        # the import lines, so the proto is compiled from a copy at the same
        # relative path: the output never depends on where the repository is.
        src = Path(scratch) / "src"
        (src / PROTO.parent).mkdir(parents=True)
        shutil.copyfile(ROOT / PROTO, src / PROTO)
        dest = Path(scratch) / "out"
        dest.mkdir()
        env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
        subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{src}",
             f"--python_out={dest}", f"--grpc_python_out={dest}",
             f"--mypy_out={dest}", f"--mypy_grpc_out={dest}", str(src / PROTO)],
            check=True, env=env)
        written = []
        for name in GENERATED:
            target = out / PROTO.parent / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(dest / PROTO.parent / name, target)
            written.append(target)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT,
                        help="root to write under (default: the repository)")
    args = parser.parse_args()
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
