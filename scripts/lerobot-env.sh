#!/usr/bin/env bash
# Build (once) the Python 3.12 environment that runs LeRobot policies and LeRobot's own
# client, and print its interpreter's path. The environment lives in a cache folder keyed
# on the hash of envs/lerobot/requirements.txt, so a machine builds it once per change.
#   ARMORY_CACHE   where environments are kept (default ~/.cache/armory)
#   ARMORY_PY312   the Python 3.12 interpreter to build it with (default: pyenv's or python3.12)
# Runs at once share the cache safely: one builds while the others wait on a lock, and
# the build happens in a temporary folder that is moved into place only when complete,
# so no run ever sees (or wipes) a half-built environment. Progress goes to stderr;
# stdout is only the interpreter's path.
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=envs/lerobot/requirements.txt
key=$(sha256sum "$requirements" | cut -c1-12)
cache=${ARMORY_CACHE:-$HOME/.cache/armory}
venv=$cache/envs/lerobot-$key
log() { echo "lerobot-env: $*" >&2; }
if [[ -x $venv/bin/python && -f $venv/.complete ]]; then
    echo "$venv/bin/python"
    exit 0
fi
mkdir -p "$cache/envs"
exec 9>"$cache/envs/.lerobot.lock"
if ! flock -n 9; then
    log "another run is building the environment; waiting for it"
    flock 9
fi
if [[ -x $venv/bin/python && -f $venv/.complete ]]; then  # built while this run waited
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
    log "no Python 3.12 found (set ARMORY_PY312)"
    exit 1
fi
tmp=$(mktemp -d "$cache/envs/.lerobot-$key.XXXXXX")
heartbeat=
cleanup() {
    [[ -n $heartbeat ]] && kill "$heartbeat" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
started=$SECONDS
log "building into $tmp (moved to $venv when complete)"
log "[1/3] creating the virtual environment with $python312"
"$python312" -m venv "$tmp" >&2
log "[2/3] upgrading pip"
"$tmp/bin/python" -m pip install -q --upgrade pip >&2
log "[3/3] installing $requirements (torch and LeRobot: several GB, minutes)"
(
    exec 9>&-  # the lock is the build's, not this loop's
    nap=
    trap '[[ -n $nap ]] && kill "$nap" 2>/dev/null; exit 0' TERM
    while true; do
        sleep 30 </dev/null >/dev/null 2>&1 &
        nap=$!
        wait "$nap"
        log "still installing: $((SECONDS - started)) s, $(du -sh "$tmp" 2>/dev/null | cut -f1) so far"
    done
) &
heartbeat=$!
"$tmp/bin/python" -m pip install -q -r "$requirements" >&2
kill "$heartbeat" 2>/dev/null
heartbeat=
# The environment's scripts name the folder they were built in; name the final one.
{ grep -rlI --null -F "$tmp" "$tmp/bin" || true; } | xargs -0 --no-run-if-empty sed -i "s|$tmp|$venv|g"
touch "$tmp/.complete"
rm -rf "$venv"  # an incomplete one, left by a run killed before its move
mv "$tmp" "$venv"
log "built in $((SECONDS - started)) s"
# Environments built from earlier requirements are no longer used.
for old in "$cache"/envs/lerobot-*; do
    [[ $old != "$venv" ]] && rm -rf "$old"
done
echo "$venv/bin/python"
