"""Latency profile files: `armory profile` writes one; the mock, fleet files and the
simulator read it back; a broken file is refused naming what is wrong."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from armory.cli import main
from armory.core.profile_file import (
    MAX_PROFILE_BYTES,
    ProfileFile,
    read_profile,
    timing_from_samples,
    write_profile,
)
from armory.fleet.loopback import mock_policy_for
from armory.fleet_spec import load_fleet
from armory.policies.base import InputSpec, Policy, PolicyMetadata
from armory.policies.mock import MockPolicyConfig
from armory.policies.profiling import WALL_TIMED, example_observations, profile_policy
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.registry import make_scheduler
from armory.sim.simulator import SimConfig, simulate
from armory.workers.errors import WorkerBatchError


class LinearClockPolicy(Policy):
    """A policy whose forward pass advances a fake clock by 10 ms + 5 ms per robot."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.batches: list[int] = []

    @property
    def metadata(self) -> PolicyMetadata:
        return PolicyMetadata(
            name="linear-clock",
            action_horizon=2,
            action_dim=1,
            inputs={
                "image": InputSpec(shape=(4, 4, 3), dtype="uint8"),
                "state": InputSpec(shape=(3,), dtype="float32"),
                "prompt": InputSpec(dtype="str", required=False),
            },
        )

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        self.batches.append(len(observations))
        self.now_s += 0.010 + 0.005 * len(observations)
        return [np.zeros((2, 1), dtype=np.float32) for _ in observations]


class FailingPolicy(LinearClockPolicy):
    """A worker-like policy whose model fails on its second batch."""

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        if self.batches:
            raise WorkerBatchError("the policy worker's model failed: out of memory")
        return super().infer_batch(observations)


def failing_policy() -> Policy:
    """policy:python's factory of FailingPolicy."""
    return FailingPolicy()


def test_profile_policy_times_each_size_warm() -> None:
    """Warm-up passes are not timed; each size's percentiles are its pass's time."""
    policy = LinearClockPolicy()
    profile = profile_policy(policy, [3, 1, 2], warmup=2, repeats=4, clock=lambda: policy.now_s)
    assert policy.batches == [1] * 6 + [2] * 6 + [3] * 6
    assert [b.batch_size for b in profile.batches] == [1, 2, 3]
    for timing in profile.batches:
        expected = 0.010 + 0.005 * timing.batch_size
        assert timing.num_samples == 4
        for value in (timing.p50_s, timing.p90_s, timing.p99_s, timing.min_s, timing.max_s):
            assert value == pytest.approx(expected)
    assert profile.policy == "linear-clock" and profile.timed == WALL_TIMED
    assert profile.points() == pytest.approx({1: 0.015, 2: 0.020, 3: 0.025})


def test_example_observations_differ_per_robot_and_match_the_inputs() -> None:
    """One observation per robot, of the declared shapes and dtypes, not all alike."""
    first, second = example_observations(LinearClockPolicy().metadata, 2)
    assert first["image"].dtype == np.uint8 and first["image"].shape == (4, 4, 3)
    assert first["state"].dtype == np.float32 and first["state"].shape == (3,)
    assert first["prompt"] != second["prompt"]
    assert not np.array_equal(first["state"], second["state"])


def test_percentiles_follow_numpy() -> None:
    """p50/p90/p99 are numpy's linear percentiles of the samples."""
    samples = [0.1, 0.2, 0.3, 0.4, 1.0]
    timing = timing_from_samples(1, samples, peak_memory_bytes=123)
    assert timing.p50_s == pytest.approx(0.3)
    assert timing.p90_s == pytest.approx(float(np.percentile(samples, 90)))
    assert (timing.min_s, timing.max_s, timing.peak_memory_bytes) == (0.1, 1.0, 123)


def small_profile() -> ProfileFile:
    return ProfileFile(
        policy="lerobot-smolvla",
        device="cpu",
        batches=(
            timing_from_samples(1, [0.040, 0.042, 0.041], 1 << 30),
            timing_from_samples(2, [0.050, 0.052, 0.051], 1 << 30),
            timing_from_samples(4, [0.080, 0.082, 0.081], None),
        ),
        warmup=1,
    )


def test_write_then_read_gives_the_same_profile(tmp_path: Path) -> None:
    """A written profile reads back equal; its points are the medians."""
    path = write_profile(tmp_path / "sub" / "p.json", small_profile())
    assert read_profile(path) == small_profile()
    assert read_profile(path).points() == {1: 0.041, 2: 0.051, 4: 0.081}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format="other"), 'no "format": "armory-latency-profile"'),
        (lambda d: d.update(version=2), "version 2, this Armory reads version 1"),
        (lambda d: d.update(colour="red"), "unknown fields \\['colour'\\]"),
        (lambda d: d["batches"][0].update(p50_s=-1.0), "times must be > 0"),
        (lambda d: d["batches"][0].update(batch_size="1"), "batch_size must be an integer"),
        (lambda d: d["batches"].reverse(), "distinct and ascending"),
        (lambda d: d.update(batches=[]), "at least one batch size"),
        (lambda d: d["batches"][0].update(peak_memory_bytes=-5), "peak_memory_bytes"),
    ],
)
def test_a_broken_profile_is_refused_naming_the_problem(
    tmp_path: Path, change: Any, message: str
) -> None:
    """Every malformed profile fails with a ValueError naming the file and the fault."""
    data = json.loads(write_profile(tmp_path / "p.json", small_profile()).read_text())
    change(data)
    (tmp_path / "p.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message) as info:
        read_profile(tmp_path / "p.json")
    assert str(tmp_path / "p.json") in str(info.value)


def test_unreadable_files_are_refused(tmp_path: Path) -> None:
    """A missing file, a file that is not JSON and an oversized file each say so."""
    with pytest.raises(ValueError, match="cannot read it"):
        read_profile(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a JSON profile file"):
        read_profile(tmp_path / "bad.json")
    (tmp_path / "big.json").write_bytes(b" " * (MAX_PROFILE_BYTES + 1))
    with pytest.raises(ValueError, match="more than"):
        read_profile(tmp_path / "big.json")


def test_armory_profile_output_is_read_by_the_mock_and_a_fleet_file(tmp_path: Path) -> None:
    """`armory profile ... policy:mock` writes a file; policy:mock --policy.latency-profile
    FILE serves its medians; a fleet file naming it (relative to the fleet file) gives the
    simulator and the live fleet's mock the same points, and the simulation runs."""
    out = tmp_path / "profiles" / "mock.json"
    args = ["profile", "--out", str(out), "--max-batch-size", "3", "--repeats", "2"]
    args += ["--warmup", "0", "policy:mock", "--policy.latency-profile", "linear"]
    args += ["--policy.linear.intercept-s", "0.004", "--policy.linear.slope-s", "0.001"]
    assert main(args) == 0
    profile = read_profile(out)
    assert [b.batch_size for b in profile.batches] == [1, 2, 3]
    assert profile.batches[0].peak_memory_bytes
    for timing in profile.batches:  # the mock sleeps its line's time, never less
        assert timing.min_s >= 0.004 + 0.001 * timing.batch_size - 1e-4
    points = profile.points()

    mock = MockPolicyConfig(latency_profile=str(out)).make()
    assert dict(mock.metadata.latency_points or {}) == points

    fleet_path = tmp_path / "fleet.yaml"
    fleet_path.write_text(
        yaml.safe_dump(
            {
                "name": "profiled",
                "action_horizon": 10,
                "max_batch_size": 3,
                "latency_profile": "profiles/mock.json",
                "robots": [{"name": "arm", "count": 3, "control_hz": 10}],
            }
        )
    )
    fleet = load_fleet(fleet_path)
    assert fleet.profile().points() == points
    assert mock_policy_for(fleet).make().metadata.latency_points == points
    scheduler = make_scheduler(SchedulerConfig())
    report = simulate(fleet, scheduler, SimConfig(duration_s=2.0))
    assert report.system.num_batches > 0


def test_a_failing_policy_stops_armory_profile_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model that fails mid-profile ends `armory profile` with exit status 1, one error
    line naming the failure and the watchdog option, and no file."""
    out = tmp_path / "p.json"
    args = ["profile", "--out", str(out), "policy:python"]
    assert main([*args, "--policy.factory", "test_profile_file:failing_policy"]) == 1
    error = capsys.readouterr().err
    assert "profiling stopped: the policy worker's model failed: out of memory" in error
    assert "--policy.worker.watchdog-min-s" in error and not out.exists()


def test_an_unknown_latency_profile_names_presets_and_files() -> None:
    """policy:mock with neither a preset nor a profile file lists both kinds."""
    with pytest.raises(ValueError, match="or a profile file"):
        MockPolicyConfig(latency_profile="fast")
