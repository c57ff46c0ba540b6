#!/usr/bin/env bash
# Build (once) the Python 3.12 environment that runs LeRobot policies and LeRobot's own
# client, and print its interpreter's path. The environment lives in a cache folder keyed
# on the hash of envs/lerobot/requirements.txt, so a machine builds it once per change.
#   ARMORY_CACHE   where environments are kept (default ~/.cache/armory)
#   ARMORY_PY312   the Python 3.12 interpreter to build it with (default: pyenv's or python3.12)
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=envs/lerobot/requirements.txt
key=$(sha256sum "$requirements" | cut -c1-12)
cache=${ARMORY_CACHE:-$HOME/.cache/armory}
venv=$cache/envs/lerobot-$key
if [[ -x $venv/bin/python && -f $venv/.complete ]]; then
    echo "$venv/bin/python"
    exit 0
fi
python312=${ARMORY_PY312:-}
if [[ -z $python312 ]]; then
    for candidate in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 python3.12; do
        if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
            python312=$candidate; break
        fi
    done
fi
if [[ -z $python312 ]]; then
    echo "lerobot-env: no Python 3.12 found (set ARMORY_PY312)" >&2
    exit 1
fi
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python312" -m venv "$venv" >&2
"$venv/bin/python" -m pip install -q --upgrade pip >&2
"$venv/bin/python" -m pip install -q -r "$requirements" >&2
touch "$venv/.complete"
# Environments built from earlier requirements are no longer used.
for old in "$cache"/envs/lerobot-*; do
    [[ $old != "$venv" ]] && rm -rf "$old"
done
echo "$venv/bin/python"
