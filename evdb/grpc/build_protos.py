"""Regenerate ``evdb/grpc/operations_pb2.py`` and its type stub ``operations_pb2.pyi`` (what mypy reads)
from ``operations.proto`` (a development step).

kurrentdbclient ships compiled modules, not ``.proto`` files, so the imported ``shared.proto`` is
handed to protoc as a descriptor set taken from ``kurrentdbclient.protos.v1.shared_pb2`` itself: the
generated module then imports that module instead of carrying a second copy of its symbols.

    .venv/bin/pip install --no-deps --target /tmp/grpcio-tools grpcio-tools==1.74.0
    PYTHONPATH=/tmp/grpcio-tools .venv/bin/python -m evdb.grpc.build_protos

grpcio-tools 1.74 writes protobuf 6.31.1 code, the version kurrentdbclient's own modules are
generated for, so the module runs on any protobuf runtime kurrentdbclient runs on.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2, empty_pb2

ROOT = Path(__file__).resolve().parents[2]
PROTO = "evdb/grpc/operations.proto"


def _descriptor_set() -> bytes:
    from kurrentdbclient.protos.v1 import shared_pb2

    files = descriptor_pb2.FileDescriptorSet()
    for module in (empty_pb2, shared_pb2):
        proto = files.file.add()
        module.DESCRIPTOR.CopyToProto(proto)
    return files.SerializeToString()


def main() -> int:
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        deps = os.path.join(tmp, "deps.pb")
        Path(deps).write_bytes(_descriptor_set())
        code = protoc.main(
            [
                "protoc",
                f"--descriptor_set_in={deps}",
                f"-I{ROOT}",
                f"--python_out={ROOT}",
                f"--pyi_out={ROOT}",
                PROTO,
            ]
        )
    if code != 0:
        print(f"protoc failed on {PROTO} (exit {code})", file=sys.stderr)
        return 1
    print(f"wrote {ROOT / PROTO.replace('.proto', '_pb2.py')} and its .pyi")
    return 0


if __name__ == "__main__":
    sys.exit(main())
