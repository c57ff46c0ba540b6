"""Fleet-file factories for the CLI, sweep and fleet-file tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


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
