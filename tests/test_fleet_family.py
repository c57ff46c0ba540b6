"""The generated fleet family: reproducible, within its documented ranges, and readable
as fleet files."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from armory.cli import main
from armory.fleet_spec import fleet_to_dict, load_fleet
from armory.sim.fleet_family import (
    MAX_ROBOTS,
    MIN_ROBOTS,
    TEST_SEEDS,
    TRAIN_SEEDS,
    fleet_load,
    generate_family,
    generate_fleet,
)


def test_the_same_seed_gives_the_same_fleet() -> None:
    """Two draws of seed 1234 are equal field by field; seed 1235 differs."""
    first = generate_fleet("mixed", 1234)
    assert fleet_to_dict(first.fleet) == fleet_to_dict(generate_fleet("mixed", 1234).fleet)
    assert fleet_to_dict(first.fleet) != fleet_to_dict(generate_fleet("mixed", 1235).fleet)


def test_fleets_stay_within_the_documented_ranges() -> None:
    """Over 150 fleets: 2-256 robots, rates 5-60 Hz, action horizons 10-50, max batch
    4-32, horizons within the action horizon, loads 0.3-1.6 (a little past where the
    robot counts are rounded or capped), and every request mode drawn."""
    modes: Counter[str] = Counter()
    loads = []
    for member in generate_family("mixed", 150, 1000):
        fleet = member.fleet
        modes[fleet.request_mode] += 1
        loads.append(member.load)
        assert member.load == pytest.approx(fleet_load(fleet))
        assert MIN_ROBOTS <= fleet.num_robots <= MAX_ROBOTS
        assert 10 <= fleet.action_horizon <= 50
        assert 4 <= fleet.max_batch_size <= 32
        for group in fleet.robots:
            assert 5 <= group.control_hz <= 60
            assert 1 <= group.min_execution_horizon <= group.max_execution_horizon
            assert group.max_execution_horizon <= fleet.action_horizon
            assert group.uplink.jitter_s <= group.uplink.median_s <= 0.150
    assert set(modes) == {"every-tick", "threshold", "directed"}
    assert min(loads) < 0.5 and max(loads) > 1.3


def test_training_and_test_seeds_do_not_overlap() -> None:
    """No seed is both a training and a test seed."""
    assert set(TRAIN_SEEDS).isdisjoint(range(TEST_SEEDS.start, TEST_SEEDS.start + 10_000))


def test_bad_family_arguments_are_named() -> None:
    """An unknown family lists the valid ones; a count below one and a negative seed are
    refused."""
    with pytest.raises(ValueError, match="valid names: mixed"):
        generate_family("nope", 1, 0)
    with pytest.raises(ValueError, match="count"):
        generate_family("mixed", 0, 0)
    with pytest.raises(ValueError, match="seed"):
        generate_family("mixed", 1, -1)


def test_armory_fleets_generate_writes_fleet_files(tmp_path: Path) -> None:
    """`armory fleets generate` writes fleet files that load back as the generated fleets;
    with --request-mode every fleet is in that mode and otherwise the same."""
    assert main(["fleets", "generate", "--out", str(tmp_path), "--count", "2", "--seed", "7"]) == 0
    paths = sorted(tmp_path.glob("*.yaml"))
    assert [p.name for p in paths] == ["mixed-00007.yaml", "mixed-00008.yaml"]
    assert fleet_to_dict(load_fleet(paths[0])) == fleet_to_dict(generate_fleet("mixed", 7).fleet)
    lerobot = tmp_path / "lerobot"
    argv = ["fleets", "generate", "--out", str(lerobot), "--count", "2", "--seed", "7"]
    assert main([*argv, "--request-mode", "chunk-fraction"]) == 0
    for path in sorted(lerobot.glob("*.yaml")):
        fleet = load_fleet(path)
        assert fleet.request_mode == "chunk-fraction"
        assert "--request-mode chunk-fraction" in path.read_text().splitlines()[0]
        own = load_fleet(tmp_path / path.name)
        in_own_mode = dataclasses.replace(fleet, request_mode=own.request_mode)
        assert fleet_to_dict(in_own_mode) == fleet_to_dict(own)
