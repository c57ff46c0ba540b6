"""The server installs by itself into an empty venv, its declared dependencies with it,
and its entry point runs there: ``armory simulate`` on a shipped fleet file.

The client package is not on a package index, so its wheel is built from the
repository and offered to pip as a place to find packages (``--find-links``): pip
installs it only because the server declares it. Nothing of the repository's source
tree is on the path of the installed server. Outside CI a pip that cannot install
(offline, no cache) skips the test; in CI it fails it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "configs" / "fleets" / "mixed-rate.yaml"


def run(args: list[str], *, cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """A command in a clean environment: no PYTHONPATH, so only what pip installed counts."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        args, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout_s, check=False
    )


def copy_package(source: Path, dest: Path) -> Path:
    """A copy of a package's sources (pyproject, README, src) to build from, so that the
    build leaves nothing in the repository."""
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(source / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    shutil.copytree(source / "src", dest / "src", ignore=ignore)
    return dest


def pip_or_skip(result: subprocess.CompletedProcess[str], what: str) -> None:
    if result.returncode != 0 and "CI" not in os.environ:
        pytest.skip(f"pip could not {what} here: {result.stderr[-300:]}")
    assert result.returncode == 0, result.stderr


def test_server_installs_alone_and_simulates(tmp_path: Path) -> None:
    """`pip install .` (no extras, not editable) into an empty venv brings the client
    package through the server's declared dependency; `armory simulate` then runs a
    shipped fleet from outside the repository."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    pip = [python, "-m", "pip", "--disable-pip-version-check", "-q"]
    client = copy_package(REPO / "packages" / "armory-client", tmp_path / "client")
    server = copy_package(REPO, tmp_path / "server")
    wheels = tmp_path / "wheels"
    built = run(
        [*pip, "wheel", "--no-deps", "-w", str(wheels), str(client)], cwd=tmp_path, timeout_s=300
    )
    pip_or_skip(built, "build the client's wheel")
    installed = run(
        [*pip, "install", "--find-links", str(wheels), str(server)], cwd=tmp_path, timeout_s=540
    )
    pip_or_skip(installed, "install the server")

    where = run(
        [
            python,
            "-c",
            "import armory, armory_client; print(armory.__file__, armory_client.__file__)",
        ],
        cwd=tmp_path,
        timeout_s=60,
    )
    assert where.returncode == 0, where.stderr
    assert all(path.startswith(str(env_dir)) for path in where.stdout.split()), where.stdout

    simulated = run(
        [str(env_dir / "bin" / "armory"), "simulate", "--fleet", str(FLEET), "--duration", "5"],
        cwd=tmp_path,
        timeout_s=120,
    )
    assert simulated.returncode == 0, simulated.stderr
    assert "starvation" in simulated.stdout and "fairness" in simulated.stdout
