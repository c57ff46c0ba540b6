#!/usr/bin/env bash
# Install Armory into .venv (created only if missing) and simulate the mixed-rate
# example fleet. Extra arguments go to `armory simulate`, e.g. --scheduler max-batch.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e '.[dev]'
exec .venv/bin/armory simulate --fleet configs/fleets/mixed-rate.yaml "$@"
