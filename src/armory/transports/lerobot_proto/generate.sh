#!/usr/bin/env bash
# Regenerate services_pb2.py and services_pb2.pyi from services.proto.
# grpcio-tools 1.73.1 bundles protoc 31, whose Python code needs protobuf >= 6.31 at run
# time (the `lerobot` extra asks for that). It is used from a throwaway venv so that
# Armory's own environment is untouched:
#   python3 -m venv /tmp/grpctools && /tmp/grpctools/bin/pip install 'grpcio-tools==1.73.1'
#   GRPC_TOOLS_PYTHON=/tmp/grpctools/bin/python src/armory/transports/lerobot_proto/generate.sh
# Only messages are generated: the service is registered by hand in lerobot_grpc.py
# (grpc's generic handlers), so no *_pb2_grpc.py and no grpcio-tools version pin at run time.
set -euo pipefail
# Compiled from src/ so that the proto's registered name (and the module name baked into
# the generated code) is armory/transports/lerobot_proto/services.proto, distinct from
# LeRobot's own lerobot/transport/services.proto.
here=$(cd "$(dirname "$0")" && pwd)
python=${GRPC_TOOLS_PYTHON:-python3}
cd "$here/../../.."
proto=armory/transports/lerobot_proto/services.proto
"$python" -m grpc_tools.protoc -I. --python_out=. --pyi_out=. "$proto"
# Generated code is not linted (the project's ruff rules do not fit protoc's output).
for out in "$here/services_pb2.py" "$here/services_pb2.pyi"; do
    printf '%s\n' '# ruff: noqa' | cat - "$out" > "$out.tmp" && mv "$out.tmp" "$out"
done
echo "generated $here/services_pb2.py and services_pb2.pyi"
