"""Shared by the fleet benchmarks: a mock server in this process, the fleet runner in another.

The server runs on its own event loop thread (:class:`~armory.serve.ServerThread`)
on an ephemeral 127.0.0.1 port, so a benchmark can give it any scheduler and read
its counters directly; the robots run as ``armory fleet`` in a child process, as a
user runs them, so the two sides do not share an interpreter lock.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from armory.engine.config import ServerConfig
from armory.fleet.loopback import mock_policy_for, server_config_for
from armory.fleet_spec import FleetSpec, fleet_to_dict
from armory.scheduling.base import Scheduler
from armory.serve import ArmoryServer, ServerThread


@contextmanager
def mock_server(
    fleet: FleetSpec, *, scheduler: Scheduler | None = None, config: ServerConfig | None = None
) -> Iterator[ServerThread]:
    """A server whose mock policy computes as ``fleet`` says the GPU does; stopped on exit."""
    config = config or server_config_for(fleet)
    server = ArmoryServer(
        mock_policy_for(fleet).make(), config, host="127.0.0.1", port=0, scheduler=scheduler
    )
    thread = ServerThread(server).start()
    try:
        yield thread
    finally:
        thread.stop()


def write_fleet(fleet: FleetSpec, directory: Path) -> Path:
    """``fleet`` as a YAML fleet file in ``directory``."""
    path = directory / f"{fleet.name}.yaml"
    path.write_text(yaml.safe_dump(_plain(fleet_to_dict(fleet)), sort_keys=False))
    return path


def run_fleet_process(
    fleet: FleetSpec, port: int, duration_s: float, *flags: str, timeout_s: float = 300.0
) -> dict[str, Any]:
    """``armory fleet`` against 127.0.0.1:``port`` in a child process; its JSON report."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        out = directory / "report.json"
        command = [
            sys.executable,
            "-m",
            "armory.cli",
            "fleet",
            "--fleet",
            str(write_fleet(fleet, directory)),
            "--port",
            str(port),
            "--duration",
            str(duration_s),
            "--json",
            str(out),
            *flags,
        ]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(f"armory fleet failed ({result.returncode}): {result.stderr}")
        return json.loads(out.read_text())


def _plain(value: Any) -> Any:
    """Tuples to lists, recursively (safe_dump writes plain YAML lists only)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
