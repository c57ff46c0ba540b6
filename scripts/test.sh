#!/usr/bin/env bash
# Install Armory and its client into .venv (created only if missing), lint, and run
# every test suite. Exits non-zero when a check fails or when no test was collected.
# Extra arguments go to pytest, e.g. -x or -k sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
client=packages/armory-client
installs=(-e '.[dev]')
suites=(tests)
if [ -d "$client" ]; then
  installs+=(-e "$client[dev]")
  if [ -d "$client/tests" ]; then suites+=("$client/tests"); fi
fi
.venv/bin/pip install -q "${installs[@]}"
.venv/bin/ruff check .
status=0
.venv/bin/pytest "${suites[@]}" "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
