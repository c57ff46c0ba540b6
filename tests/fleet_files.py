"""Fleet-file factories for the CLI, sweep, fleet-file and fleet-runner tests, and the
repository's scripts (fleet generators, benchmarks) loaded as modules."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from server_harness import FAST_LINEAR

from armory.fleet_spec import FleetSpec, fleet_from_dict

REPO = Path(__file__).resolve().parents[1]


def load_script(relative_path: str) -> ModuleType:
    """A script of the repository (``scripts/...``, ``benchmarks/...``: not an installed
    module), loaded as a module."""
    path = REPO / relative_path
    name = f"_script_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as an import would be: dataclasses look their module up.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def make_fleet_dict(name: str = "tiny", num_robots: int = 2, **overrides: Any) -> dict[str, Any]:
    """A small fleet-file mapping: ``num_robots`` 20 Hz robots on the l40s-pi05 profile."""
    data: dict[str, Any] = {
        "name": name,
        "action_horizon": 10,
        "max_batch_size": 4,
        "latency_profile": "l40s-pi05",
        "robots": [{"name": "arm", "count": num_robots, "control_hz": 20}],
    }
    data.update(overrides)
    return data


def write_fleet_file(directory: Path, data: dict[str, Any], suffix: str = ".yaml") -> Path:
    """Write ``data`` as ``<directory>/<name><suffix>`` (YAML or JSON by suffix)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{data.get('name', 'fleet')}{suffix}"
    text = json.dumps(data) if suffix == ".json" else yaml.safe_dump(data, sort_keys=False)
    path.write_text(text)
    return path


DELAY = {"median_s": 0.004, "jitter_s": 0.002}
MIXED_GROUPS = [
    {"name": "arm", "count": 3, "control_hz": 30, "min_execution_horizon": 2},
    {"name": "base", "count": 3, "control_hz": 10, "min_execution_horizon": 2},
    {"name": "heavy", "count": 2, "control_hz": 20, "min_execution_horizon": 2, "weight": 2},
]


def mixed_fleet(
    request_mode: str = "directed", groups: list[dict[str, Any]] | None = None
) -> FleetSpec:
    """8 robots at 10-30 Hz (two weighted 2; or ``groups``, each given its links) on the
    tests' fast linear profile."""
    robots = [{**g, "uplink": DELAY, "downlink": DELAY} for g in groups or MIXED_GROUPS]
    return fleet_from_dict(
        make_fleet_dict(
            "fleet-test",
            robots=robots,
            max_batch_size=4,
            latency_profile="linear",
            linear=dataclasses.asdict(FAST_LINEAR),
            request_mode=request_mode,
        )
    )
