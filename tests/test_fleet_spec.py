"""Fleet files: loading YAML and JSON, rejecting bad keys and values, the shipped configs."""

from __future__ import annotations

from pathlib import Path

import pytest
from fleet_files import REPO, load_script, make_fleet_dict, write_fleet_file

from armory.fleet_spec import (
    DelaySpec,
    FleetSpec,
    RobotGroup,
    fleet_from_dict,
    fleet_to_dict,
    load_fleet,
)


def test_yaml_and_json_files_load_the_same_fleet(tmp_path: Path) -> None:
    """A mapping written as YAML and as JSON loads to equal fleets."""
    data = make_fleet_dict(
        robots=[
            {"name": "arm", "count": 2, "control_hz": 30, "weight": 2, "uplink": 0.01},
            {"name": "base", "count": 1, "control_hz": 10, "downlink": {"median_s": 0.02}},
        ],
        latency_points={1: 0.05, 4: 0.2},
        request_mode="threshold",
    )
    from_yaml = load_fleet(write_fleet_file(tmp_path, data, ".yaml"))
    from_json = load_fleet(write_fleet_file(tmp_path, data, ".json"))
    assert from_yaml == from_json
    assert from_yaml.num_robots == 3
    assert from_yaml.latency_points == {1: 0.05, 4: 0.2}
    assert from_yaml.robots[0].uplink == DelaySpec(median_s=0.01, jitter_s=0.0)
    assert from_yaml.robots[1].downlink == DelaySpec(median_s=0.02)


def test_defaults_fill_missing_keys(tmp_path: Path) -> None:
    """Only robots are needed: the name defaults to the file's stem, groups to g<i>."""
    path = tmp_path / "bare.yaml"
    path.write_text("robots:\n  - count: 2\n")
    fleet = load_fleet(path)
    assert fleet.name == "bare"
    assert [r.robot_id for r in fleet.robot_specs()] == ["g0-0", "g0-1"]
    assert fleet.max_batch_size == FleetSpec.max_batch_size


def test_round_trip_through_a_mapping() -> None:
    """fleet_to_dict and fleet_from_dict are inverses."""
    fleet = FleetSpec(
        name="rt",
        robots=(RobotGroup(count=2, uplink=DelaySpec(0.01, 0.005)), RobotGroup(name="b")),
        latency_points={1: 0.1, 2: 0.15},
    )
    assert fleet_from_dict(fleet_to_dict(fleet)) == fleet


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"max_batch": 4}, "max_batch"),
        ({"robots": [{"count": 1, "hz": 20}]}, "hz"),
        ({"robots": [{"count": 1, "uplink": {"median_s": 0.01, "sigma": 0.1}}]}, "sigma"),
    ],
)
def test_unknown_keys_are_rejected_by_name(tmp_path: Path, overrides: dict, named: str) -> None:
    """An unknown key anywhere in the file fails with the key and the file named."""
    path = write_fleet_file(tmp_path, make_fleet_dict(**overrides))
    with pytest.raises(ValueError, match=named) as info:
        load_fleet(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"request_mode": "sometimes"}, "request_mode 'sometimes'"),
        ({"max_batch_size": 0}, "max_batch_size must be >= 1"),
        ({"latency_profile": "h100"}, "unknown latency profile 'h100'"),
        ({"latency_jitter": 1.5}, "latency_jitter"),
        ({"chunk_size_threshold": 1.5}, r"chunk_size_threshold must be in \[0, 1\], got 1\.5"),
        ({"chunk_size_threshold": float("nan")}, "chunk_size_threshold must be a finite"),
        ({"robots": []}, "at least one robot group"),
        ({"robots": [{"count": 0}]}, "count must be >= 1"),
        ({"robots": [{"control_hz": -1}]}, "control_hz must be > 0"),
        ({"robots": [{"max_execution_horizon": 12}]}, "exceeds the action_horizon"),
        ({"robots": [{"min_execution_horizon": 5, "max_execution_horizon": 4}]}, "min_execution"),
        ({"robots": [{"uplink": {"median_s": 0.001, "jitter_s": 0.002}}]}, "jitter_s"),
        ({"robots": [{"weight": 0}]}, "weight must be > 0"),
        ({"latency_points": {1: -0.1}}, "latency must be positive"),
        ({"latency_points": [0.1, 0.2]}, "latency_points is a mapping"),
        ({"robots": [{"name": "a"}, {"name": "a"}]}, "robot group names must differ"),
        ({"robots": [{"count": 2.5}]}, r"robots\[0\]\.count must be a whole number, got 2\.5"),
        ({"robots": [{"count": "two"}]}, r"robots\[0\]\.count must be a whole number, got 'two'"),
        ({"robots": [{"control_hz": float("inf")}]}, r"robots\[0\]\.control_hz must be a finite"),
        ({"robots": [{"weight": float("inf")}]}, r"robots\[0\]\.weight must be a finite"),
        ({"robots": [{"uplink": float("nan")}]}, r"robots\[0\]\.uplink\.median_s must be a finite"),
        ({"max_batch_size": True}, "max_batch_size must be a whole number"),
        ({"latency_points": {1: float("inf")}}, "latency_points must be finite"),
        ({"linear": {"intercept": 0.1}}, r"unknown keys \['intercept'\] under linear; valid keys"),
    ],
)
def test_invalid_values_fail_with_a_clear_message(
    tmp_path: Path, overrides: dict, message: str
) -> None:
    """Each invalid value is rejected with a message naming what is wrong and the file."""
    path = write_fleet_file(tmp_path, make_fleet_dict(**overrides))
    with pytest.raises(ValueError, match=message) as info:
        load_fleet(path)
    assert str(path) in str(info.value)


def test_shipped_paper_files_match_the_paper_grid() -> None:
    """configs/fleets/paper holds exactly the script's grid, one file per fleet, unchanged."""
    directory = REPO / "configs" / "fleets" / "paper"
    files = {path.stem: path for path in directory.glob("*.yaml")}
    grid = {fleet.name: fleet for fleet in load_script("scripts/paper_grid.py").paper_grid()}
    assert sorted(files) == sorted(grid)
    for name, fleet in grid.items():
        assert load_fleet(files[name]) == fleet, name


@pytest.mark.parametrize("name", ["mixed-rate", "threshold-demo", "lerobot-demo", "scale-1000"])
def test_example_fleets_load(name: str) -> None:
    """The example fleet files under configs/fleets load and are named after their files."""
    fleet = load_fleet(REPO / "configs" / "fleets" / f"{name}.yaml")
    assert fleet.name == name


def test_scale_example_has_a_thousand_robots() -> None:
    """scale-1000 is 1000 threshold-mode robots on the linear profile, batches up to 64."""
    fleet = load_fleet(REPO / "configs" / "fleets" / "scale-1000.yaml")
    assert fleet.num_robots == 1000
    assert fleet.request_mode == "threshold"
    assert fleet.max_batch_size == 64
    assert fleet.profile().latency_s(64) == pytest.approx(0.05 + 64 * 0.002)
