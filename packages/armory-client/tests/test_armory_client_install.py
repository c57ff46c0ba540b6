"""The client package stands alone: it installs by itself with no torch, imports nothing
heavy, and imports quickly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1]
HEAVY_MODULES = ("torch", "PIL", "matplotlib", "scipy", "cv2", "armory")
"""Never imported by ``import armory_client`` (pillow and matplotlib are optional extras)."""

_MEASURE = """
import json, sys, time
t0 = time.perf_counter()
import asyncio, msgpack, numpy, websockets.asyncio.client
t1 = time.perf_counter()
import armory_client
t2 = time.perf_counter()
print(json.dumps({"deps_s": t1 - t0, "own_s": t2 - t1, "modules": sorted(sys.modules)}))
"""


def measure_import(python: str) -> dict[str, object]:
    """Seconds to import the client's dependencies, then the client itself, in a fresh
    interpreter, and the modules loaded."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [python, "-c", _MEASURE], capture_output=True, text=True, check=True, env=env, timeout=60
    )
    return json.loads(out.stdout)


def loaded_heavy(modules: list[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(HEAVY_MODULES))


def test_import_loads_nothing_heavy_and_is_quick() -> None:
    """`import armory_client` loads no torch, pillow, matplotlib, scipy or server code; on
    top of numpy, msgpack, websockets and asyncio it takes well under a second (about
    50 ms measured; docs/benchmarks.md)."""
    result = measure_import(sys.executable)
    assert loaded_heavy(result["modules"]) == []  # type: ignore[arg-type]
    assert result["own_s"] < 0.5, result["own_s"]


def test_installs_alone_without_torch(tmp_path: Path) -> None:
    """`pip install packages/armory-client` into an empty venv: numpy, msgpack and
    websockets come with it, torch does not, and the import works there."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(PACKAGE_DIR)],
        capture_output=True,
        text=True,
        timeout=540,
    )
    if install.returncode != 0 and "CI" not in os.environ:
        pytest.skip(f"pip could not install the client here: {install.stderr[-300:]}")
    assert install.returncode == 0, install.stderr
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"armory-client", "numpy", "msgpack", "websockets"} <= names
    assert not names & {"torch", "pillow", "matplotlib", "scipy"}
    assert loaded_heavy(measure_import(python)["modules"]) == []  # type: ignore[arg-type]
