#!/usr/bin/env bash
# The main command: install Armory and its client into .venv (created only if missing),
# start a mock policy server on a free local port, run the mixed-rate-gpu fleet
# (configs/fleets/mixed-rate-gpu.yaml: 8 robots at 10-30 Hz, real clients over real
# sockets) against it for 20 s, print the per-robot table, and stop the server.
# Extra arguments go to `armory fleet`, e.g. --duration 60 or --request-mode threshold.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e 'packages/armory-client[dev]' -e '.[dev]'

port=$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The server computes as the fleet file says the GPU does: max batch 8, a forward pass
# of 50 ms + 10 ms per robot, directed-mode margin 50 ms (the fleet's threshold_margin_s).
.venv/bin/armory serve --port "$port" --log-level WARNING \
  --server.max-batch-size 8 --server.directed-margin-s 0.05 \
  policy:mock --policy.latency-profile linear \
  --policy.linear.intercept-s 0.05 --policy.linear.slope-s 0.01 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT

for _ in $(seq 100); do
  if .venv/bin/python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/healthz', timeout=1)" 2>/dev/null; then
    break
  fi
  kill -0 "$server" 2>/dev/null || { echo "run-main.sh: the server did not start" >&2; exit 1; }
  sleep 0.1
done

.venv/bin/armory fleet --port "$port" --fleet configs/fleets/mixed-rate-gpu.yaml --duration 20 "$@"
