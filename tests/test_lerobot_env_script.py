"""scripts/lerobot-env.sh: one build at a time, in a temporary folder moved into place.

A stub stands in for Python 3.12 (``ARMORY_PY312``): its ``-m venv`` makes a folder
with a ``bin/python`` stub and a script whose first line names the folder, and its
``-m pip install -r`` sleeps, then logs the install (or fails, if told to).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "lerobot-env.sh"

VENV_PYTHON = """#!/usr/bin/env bash
# A stub environment's interpreter: logs installs of requirements.
if [[ "$1 $2 $3" == "-m pip install" ]]; then
    for arg in "$@"; do
        if [[ $arg == -r ]]; then
            sleep 1
            [[ -n ${STUB_FAIL:-} ]] && exit 1
            echo install >> "$STUB_LOG"
        fi
    done
fi
"""

PYTHON312 = """#!/usr/bin/env bash
# A stub Python 3.12: `-m venv DIR` makes a stub environment in DIR.
if [[ "$1" == "-m" && "$2" == "venv" ]]; then
    mkdir -p "$3/bin"
    cp "$STUB_VENV_PYTHON" "$3/bin/python"
    printf '#!%s/bin/python\\n' "$3" > "$3/bin/tool"
    chmod +x "$3/bin/python" "$3/bin/tool"
fi
"""


@pytest.fixture
def stub_env(tmp_path: Path) -> dict[str, str]:
    """The environment variables that point the script at a stub Python and a fresh cache."""
    venv_python = tmp_path / "venv_python"
    venv_python.write_text(VENV_PYTHON)
    python312 = tmp_path / "python3.12"
    python312.write_text(PYTHON312)
    python312.chmod(0o755)
    return {
        **os.environ,
        "ARMORY_CACHE": str(tmp_path / "cache"),
        "ARMORY_PY312": str(python312),
        "STUB_VENV_PYTHON": str(venv_python),
        "STUB_LOG": str(tmp_path / "installs.log"),
    }


def _final_venv(env: dict[str, str]) -> Path:
    key = hashlib.sha256((REPO / "envs" / "lerobot" / "requirements.txt").read_bytes())
    return Path(env["ARMORY_CACHE"]) / "envs" / f"lerobot-{key.hexdigest()[:12]}"


def _start(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_two_runs_at_once_build_once_and_agree(stub_env: dict[str, str]) -> None:
    """Two runs started together: one builds, the other waits; both print the same path,
    nothing half-built is left, and the scripts name the final folder."""
    runs = [_start(stub_env), _start(stub_env)]
    outputs = [run.communicate(timeout=60) for run in runs]
    venv = _final_venv(stub_env)
    assert [run.returncode for run in runs] == [0, 0], outputs
    assert [out for out, _ in outputs] == [f"{venv}/bin/python\n"] * 2
    assert Path(stub_env["STUB_LOG"]).read_text() == "install\n"
    assert (venv / ".complete").exists()
    assert (venv / "bin" / "tool").read_text() == f"#!{venv}/bin/python\n"
    assert sorted(p.name for p in venv.parent.iterdir()) == [".lerobot.lock", venv.name]
    progress = "".join(err for _, err in outputs)
    assert "[3/3] installing" in progress and "built in" in progress


def test_a_failed_build_leaves_nothing_behind(stub_env: dict[str, str]) -> None:
    """An install that fails exits non-zero and leaves neither the environment nor its
    temporary folder; an incomplete environment from an earlier run is not used."""
    venv = _final_venv(stub_env)
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")  # no .complete: an interrupted earlier build
    result = subprocess.run(
        ["bash", str(SCRIPT)],
        env={**stub_env, "STUB_FAIL": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0 and result.stdout == ""
    assert not [p for p in venv.parent.iterdir() if p.name.startswith(".lerobot-")]
    assert not (venv / ".complete").exists()
