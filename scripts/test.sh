#!/usr/bin/env bash
# Install Armory and its client into .venv (created only if missing), lint, and run
# every test suite. Exits non-zero when a check fails or when no test was collected.
# Extra arguments go to pytest, e.g. -x or -k sweep; -n 0 runs the tests in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
# Armory declares armory-client as a dependency; naming the local package beside it
# lets pip resolve it from the repository. Two tests install each package alone into
# an empty venv and run it (tests/test_install_alone.py, the client's
# test_armory_client_install.py).
client=packages/armory-client
.venv/bin/pip install -q -e "$client[dev]" -e '.[dev]'
suites=(tests "$client/tests")
# env:aloha's gym-aloha pins mujoco<3.9 but runs on the MuJoCo and dm-control installed
# above (pyproject.toml's aloha extra); installed without its pins.
.venv/bin/pip install -q --no-deps 'gym-aloha==0.1.5'
# The unmodified PyPI openpi-client (0.1.2 needs numpy<2) lives in its own venv for the
# compatibility test (tests/test_openpi_server_upstream.py). Created once; if it cannot be
# installed (e.g. offline), that test is skipped with the reason.
openpi_venv=.venv-openpi
if ! "$openpi_venv/bin/python" -c 'import openpi_client.websocket_client_policy' 2>/dev/null; then
  # typing_extensions: imported by openpi-client 0.1.2 but not declared by it. websockets
  # >= 17.1 (openpi-client asks >= 11.0): its blocking client follows a cluster's redirect.
  { [ -x "$openpi_venv/bin/python" ] || python3 -m venv "$openpi_venv"; } &&
    "$openpi_venv/bin/pip" install -q 'openpi-client==0.1.2' 'websockets>=17.1' typing_extensions ||
    echo "test.sh: could not install openpi-client into $openpi_venv; its test will be skipped" >&2
fi
# LeRobot 0.6.1 (Python 3.12, its own torch) runs policy workers and LeRobot's own client
# in the tests that need it; built once per change of envs/lerobot/requirements.txt into
# ~/.cache/armory. In CI a failed build fails the run; elsewhere those tests are skipped.
if [ -z "${ARMORY_LEROBOT_PYTHON:-}" ]; then
  if lerobot_python=$(bash scripts/lerobot-env.sh); then
    export ARMORY_LEROBOT_PYTHON=$lerobot_python
  elif [ "${CI:-}" = "true" ]; then
    echo "test.sh: could not build the LeRobot environment (scripts/lerobot-env.sh)" >&2
    exit 1
  else
    echo "test.sh: no LeRobot environment; its tests will be skipped" >&2
  fi
fi
# Debian packages some tests need are installed when missing and the user is root (as in
# CI), with an apt-get update only when the package lists do not know them; elsewhere a
# missing package skips its test (in CI, CI=true, it fails it).
can_apt_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "$@" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && apt-get install -y -q "$@" >/dev/null; }
}
# Chromium runs the dashboard's browser test (tests/test_dashboard_browser.py).
if ! command -v chromium >/dev/null 2>&1 && can_apt_install; then
  apt_install chromium ||
    echo "test.sh: could not install chromium; the dashboard's browser test needs it" >&2
fi
# SO-101's camera renders with MuJoCo, which needs EGL or OSMesa without a display
# (src/armory/eval/headless_gl.py): OSMesa (libosmesa6) when neither is installed, for the
# camera test (tests/test_eval_camera.py).
if ! .venv/bin/python -c 'import sys; from armory.eval.headless_gl import choose_gl; sys.exit(choose_gl({}) is None)' &&
  can_apt_install; then
  apt_install --no-install-recommends libosmesa6 ||
    echo "test.sh: could not install libosmesa6; the camera test needs it (or EGL)" >&2
fi
.venv/bin/ruff check .
status=0
# Two worker processes (CI's two cores), each taking whole test files: a file's module
# fixtures (a LeRobot worker, a TLS certificate) start once, and the tests of one file that
# share machine-wide state (Ray's current-cluster file) never run side by side.
.venv/bin/pytest -n 2 --dist loadfile "${suites[@]}" "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
