"""The fleet runner: a fleet file's robots as real clients against a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from armory_client import ARMORY_KEY, InferClient, RuntimeSummary
from fleet_files import REPO, make_fleet_dict, mixed_fleet, write_fleet_file
from server_harness import expected_actions, make_mock, running_server

from armory.cli import main
from armory.core.latency_profile import LinearProfileConfig
from armory.fleet import FleetError, FleetOptions, FleetProgress, run_fleet
from armory.fleet.loopback import mock_policy_for, server_config_for
from armory.fleet.observations import ObservationFactory
from armory.fleet.runner import robot_tally, served_fleet
from armory.fleet_spec import DelaySpec, FleetSpec, RobotSpec, fleet_from_dict, load_fleet
from armory.policies.base import Policy
from armory.policies.mock import MockPolicyConfig
from armory.scheduling.registry import make_scheduler
from armory.server_stats import StatsReading, stats_url
from armory.sim.simulator import SimConfig, simulate


class CheckingClient:
    """Wraps a robot's client; checks every reply against the mock's chunk of the very
    observation sent (a chunk of any other observation, its own or another robot's, differs)."""

    def __init__(self, inner: InferClient, policy: Policy) -> None:
        self.inner = inner
        self.policy = policy
        self.num_replies = 0
        self.num_wrong = 0

    async def connect(self) -> Any:
        return await self.inner.connect()

    async def infer(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        reply = await self.inner.infer(obs)
        own = {key: value for key, value in obs.items() if key != ARMORY_KEY}
        self.num_replies += 1
        if not np.array_equal(reply["actions"], expected_actions(self.policy, own)):
            self.num_wrong += 1
        return reply

    async def close(self) -> None:
        await self.inner.close()


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def simulate_keys(fleet: FleetSpec) -> dict[str, Any]:
    report = simulate(fleet, make_scheduler("just-in-time"), SimConfig(duration_s=1.0))
    return dataclasses.asdict(report)


def test_mixed_rate_fleet_gets_chunks_of_its_own_observations() -> None:
    """8 robots at 10-30 Hz for 3 s: every reply is the mock's chunk of the observation that
    robot sent, every robot plays, and the report has simulate's keys with wire extras."""
    fleet = mixed_fleet()
    policy = make_mock()
    checkers: dict[str, CheckingClient] = {}
    progress: list[FleetProgress] = []

    def wrap(spec: RobotSpec, client: InferClient) -> InferClient:
        checkers[spec.robot_id] = CheckingClient(client, policy)
        return checkers[spec.robot_id]

    with running_server(policy, max_batch_size=4) as server:
        options = FleetOptions(port=server.port, duration_s=3.0, connect_timeout_s=5.0)
        run = run_fleet(
            fleet,
            options,
            bound_of=lambda _fleet, _gpus: 0.0,
            wrap_client=wrap,
            on_progress=progress.append,
        )
        report = asyncio.run(run)
        stats = server.stats()

    ids = [spec.robot_id for spec in fleet.robot_specs()]
    assert [r.id for r in report.robots] == ids
    for robot in report.robots:
        checker = checkers[robot.id]
        assert checker.num_wrong == 0, robot.id
        assert checker.num_replies >= 2 and robot.inferences >= 2, robot
        assert robot.starvation < 0.5 and robot.actions_per_s > 0, robot
        assert 0 < robot.mean_age_s < 1.0, robot
        assert robot.bytes_sent_per_s is not None
        # Two 224x224x3 uint8 images per observation, at least one observation a second.
        assert robot.bytes_sent_per_s > 2 * 224 * 224 * 3
    assert stats.num_errors == 0
    assert report.clock == "wall" and report.request_mode == "directed"
    assert report.scheduler == "just-in-time" and report.fleet == "fleet-test"
    assert report.system.num_batches > 0 and report.system.mean_batch_size >= 1.0
    assert 0 < report.system.gpu_utilization <= 1.0
    assert report.timing["num_request_errors"] == 0

    data = json.loads(json.dumps(dataclasses.asdict(report)))
    expected = simulate_keys(fleet)
    assert set(data) == set(expected)
    assert set(data["system"]) == set(expected["system"])
    assert set(data["robots"][0]) == set(expected["robots"][0])
    assert data["system"]["bound_starvation"] == 0.0
    assert data["system"]["bytes_sent_per_robot_per_s"] > 0
    # About once a second during the run: time goes on and chunks add up.
    assert len(progress) >= 2
    assert [p.elapsed_s for p in progress] == sorted(p.elapsed_s for p in progress)
    assert 0 < progress[0].num_chunks_applied <= progress[-1].num_chunks_applied
    last = progress[-1]
    assert last.num_batches is not None and 0 < last.num_batches <= stats.num_batches
    assert 0.0 <= last.starvation <= 1.0
    assert {"starved", "batches", "chunks", "errors"} <= last.postfix().keys()


def test_every_tick_sends_more_bytes_than_chunk_fraction_and_directed() -> None:
    """The request mode decides the wire: every-tick sends an observation whenever allowed,
    chunk-fraction (LeRobot's rule) on every tick while the queue holds at most half a
    chunk, directed about one per chunk."""
    groups = [{"name": "arm", "count": 2, "control_hz": 20}]
    sent = {}
    with running_server(make_mock(), max_batch_size=4) as server:
        for mode in ("every-tick", "chunk-fraction", "directed"):
            options = FleetOptions(port=server.port, duration_s=1.5, request_mode=mode)
            report = asyncio.run(run_fleet(mixed_fleet("threshold", groups), options))
            assert report.request_mode == mode
            assert all(r.inferences >= 1 for r in report.robots)
            sent[mode] = report.system.bytes_sent_per_robot_per_s
    assert sent["every-tick"] > 1.25 * sent["chunk-fraction"]
    assert sent["chunk-fraction"] > 1.25 * sent["directed"]


def test_unreachable_server_is_a_fleet_error() -> None:
    """No server on the port: FleetError naming the address, after the connect timeout."""
    port = free_port()
    options = FleetOptions(port=port, duration_s=1.0, connect_timeout_s=0.3)
    with pytest.raises(FleetError, match=f"cannot reach the policy server.*{port}"):
        asyncio.run(run_fleet(mixed_fleet(), options))


def test_horizon_longer_than_the_policys_is_refused() -> None:
    """A robot playing more actions per chunk than the policy returns cannot run."""
    fleet = fleet_from_dict(
        make_fleet_dict(action_horizon=12, robots=[{"name": "arm", "max_execution_horizon": 12}])
    )
    with running_server(make_mock()) as server:
        options = FleetOptions(port=server.port, duration_s=1.0)
        with pytest.raises(FleetError, match=r"plays 12 actions per chunk.*returns 10"):
            asyncio.run(run_fleet(fleet, options))


# ---- the command line ------------------------------------------------------------


def test_fleet_command_prints_the_table_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """armory fleet against a live server: per-robot table with bytes sent, JSON report,
    --plot's PNGs."""
    path = write_fleet_file(tmp_path, make_fleet_dict(num_robots=2, request_mode="threshold"))
    out = tmp_path / "report.json"
    with running_server(make_mock(), api_key="k-9") as server:
        argv = ["fleet", "--fleet", str(path), "--port", str(server.port), "--duration", "1"]
        plots = tmp_path / "plots"
        assert main([*argv, "--api-key", "k-9", "--json", str(out), "--plot", str(plots)]) == 0
    printed = capsys.readouterr().out
    assert "arm-1" in printed and "KB/s sent" in printed and "wall time:" in printed
    for name in ("queue_depth.png", "batch_sizes.png"):
        assert (plots / name).read_bytes().startswith(b"\x89PNG"), name
        assert f"wrote {plots / name}" in printed
    report = json.loads(out.read_text())
    assert report["request_mode"] == "threshold" and report["clock"] == "wall"
    assert 0.0 <= report["system"]["bound_starvation"] <= 1.0
    assert [r["id"] for r in report["robots"]] == ["arm-0", "arm-1"]


def test_unreachable_server_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No server: exit 2 and one line saying the server cannot be reached, and where."""
    path = write_fleet_file(tmp_path, make_fleet_dict())
    port = free_port()
    argv = ["fleet", "--fleet", str(path), "--port", str(port), "--connect-timeout-s", "0.3"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("armory: error: cannot reach the policy server")
    assert f"127.0.0.1:{port}" in err and err.count("\n") == 1


def test_wrong_api_key_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refused handshake names HTTP 401 and the API key."""
    path = write_fleet_file(tmp_path, make_fleet_dict())
    with running_server(make_mock(), api_key="right") as server:
        argv = ["fleet", "--fleet", str(path), "--port", str(server.port), "--api-key", "wrong"]
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert "HTTP 401" in err and "API key" in err and err.count("\n") == 1


def test_server_dying_mid_run_is_an_error_not_a_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server stops 1 s into a 3 s run: exit 1 and one line saying so, no table."""
    path = write_fleet_file(tmp_path, make_fleet_dict(num_robots=2))
    with running_server(make_mock()) as server:
        timer = threading.Timer(1.0, server.stop)
        timer.start()
        argv = ["fleet", "--fleet", str(path), "--port", str(server.port), "--duration", "3"]
        status = main([*argv, "--connect-timeout-s", "1", "--request-timeout-s", "1"])
        timer.join()
    captured = capsys.readouterr()
    assert status == 1
    assert "stopped answering during the run" in captured.err
    assert "starvation:" not in captured.out


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--duration", "0"], "--duration-s must be > 0"),
        (["--port", "70000"], "--port must be in 0..65535"),
        (["--host", "ws://door:8000/?robot=x"], "names a robot; each robot of the fleet"),
    ],
)
def test_bad_option_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], expected: str
) -> None:
    """Options are checked before anything connects."""
    path = write_fleet_file(tmp_path, make_fleet_dict())
    assert main(["fleet", "--fleet", str(path), *flags]) == 2
    assert expected in capsys.readouterr().err


# ---- parts -------------------------------------------------------------------------


def test_observations_match_the_declared_inputs() -> None:
    """Required inputs get arrays of the declared shape and dtype; state differs per step and
    robot; camera frames come from a shared bank; optional inputs are left out."""
    metadata_inputs = {key: spec.to_wire() for key, spec in MockPolicyConfig().inputs().items()}
    factory = ObservationFactory(metadata_inputs, seed=3, num_frames=4)
    first, again, later, other = (
        factory.make(0, 0),
        factory.make(0, 0),
        factory.make(0, 1),
        factory.make(1, 0),
    )
    assert set(first) == {"observation/image", "observation/wrist_image", "observation/state"}
    image = first["observation/image"]
    assert image.shape == (224, 224, 3) and image.dtype == np.uint8
    assert first["observation/state"].shape == (8,)
    assert first["observation/state"].dtype == np.float32
    np.testing.assert_array_equal(first["observation/state"], again["observation/state"])
    assert not np.array_equal(first["observation/state"], later["observation/state"])
    assert not np.array_equal(first["observation/state"], other["observation/state"])
    assert factory.make(0, 4)["observation/image"] is image


def test_mock_policy_for_a_fleet_reproduces_its_profile() -> None:
    """Presets pass through; explicit points on a line become the linear preset; points off
    a line are refused; the server config takes the fleet's max batch and margin."""
    preset = mock_policy_for(fleet_from_dict(make_fleet_dict(action_horizon=12)))
    assert (preset.latency_profile, preset.action_horizon) == ("l40s-pi05", 12)
    line = mock_policy_for(
        fleet_from_dict(make_fleet_dict(latency_points={1: 0.06, 2: 0.09, 4: 0.15}))
    )
    assert line.latency_profile == "linear"
    assert line.linear == pytest.approx(LinearProfileConfig(intercept_s=0.03, slope_s=0.03))
    with pytest.raises(ValueError, match="not on a line"):
        mock_policy_for(fleet_from_dict(make_fleet_dict(latency_points={1: 0.06, 2: 0.07, 4: 0.2})))
    config = server_config_for(fleet_from_dict(make_fleet_dict(threshold_margin_s=0.02)))
    assert (config.max_batch_size, config.directed_margin_s) == (4, 0.02)


def test_the_bound_is_computed_for_the_fleet_the_server_serves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server's max batch and learned latency replace the fleet file's where they
    differ (each with a warning); what matches, or is not reported, stays the file's."""
    fleet = fleet_from_dict(make_fleet_dict(max_batch_size=4))  # l40s-pi05: 250 ms at 4
    same = StatsReading({}, 0.0, None, None, 0.0, 0, latency_points_s={1: 0.07, 4: 0.25})
    slow = StatsReading({}, 0.0, None, None, 0.0, 0, latency_points_s={1: 0.2, 8: 0.9})
    assert served_fleet(fleet, {"armory": {"max_batch_size": 4}}, same) == fleet
    assert served_fleet(fleet, {}, None) == fleet
    assert not caplog.records

    served = served_fleet(fleet, {"armory": {"max_batch_size": 8}}, slow)
    assert served.max_batch_size == 8 and served.latency_points == {1: 0.2, 8: 0.9}
    messages = [record.getMessage() for record in caplog.records]
    assert "max_batch_size 4, the server batches up to 8" in messages[0]
    assert "the bound uses the server's" in messages[1] and "900 ms" in messages[1]


def test_stats_difference_covers_the_run_only() -> None:
    """Batches and busy time between two /stats readings; the URL follows the ws URI."""
    before = StatsReading({1: 3, 2: 1}, 1.0, None, None, 0.1, 0)
    after = StatsReading({1: 5, 2: 1, 4: 2}, 2.5, 0.4, 1.2, 0.1, 0)
    assert after.since(before) == ({1: 2, 4: 2}, 1.5)
    assert after.since(None) == ({1: 5, 2: 1, 4: 2}, 2.5)
    assert stats_url("ws://10.0.0.2:8000") == "http://10.0.0.2:8000/stats"
    assert stats_url("wss://gpu.example/x") == "https://gpu.example/stats"


def test_main_command_fleet_matches_the_scripts_server() -> None:
    """configs/fleets/mixed-rate-gpu.yaml (scripts/run-main.sh) needs the mock and server
    options the script passes: linear 50 ms + 10 ms, max batch 8, margin 50 ms."""
    fleet = load_fleet(REPO / "configs" / "fleets" / "mixed-rate-gpu.yaml")
    mock = mock_policy_for(fleet)
    assert mock.latency_profile == "linear"
    assert mock.linear == LinearProfileConfig(intercept_s=0.05, slope_s=0.01)
    config = server_config_for(fleet)
    assert (config.max_batch_size, config.directed_margin_s) == (8, 0.05)
    script = (REPO / "scripts" / "run-main.sh").read_text()
    for flag in (
        "--server.max-batch-size 8",
        "--server.directed-margin-s 0.05",
        "--policy.latency-profile linear",
        "--policy.linear.intercept-s 0.05",
        "--policy.linear.slope-s 0.01",
    ):
        assert flag in script


def runtime_summary(*, num_ticks: int, counted: int, starved: int, chunks: int) -> RuntimeSummary:
    """A robot runtime's summary of a 10 s run at 20 Hz with the given tick counts."""
    return RuntimeSummary(
        elapsed_s=10.0,
        num_ticks=num_ticks,
        num_missed_ticks=0,
        num_counted_ticks=counted,
        num_starved_ticks=starved,
        starvation=starved / counted if counted else 1.0,
        num_executed=counted - starved,
        actions_per_s=0.0,
        num_requests=num_ticks,
        requests_per_s=20.0,
        num_request_errors=0,
        num_chunks_applied=chunks,
        num_chunks_dropped=0,
        num_chunks_nonfinite=0,
        num_stale_episode_replies=0,
        num_deferred_replies=0,
        bytes_sent=0,
        bytes_sent_per_s=0.0,
        mean_round_trip_s=None,
    )


@pytest.mark.parametrize(
    ("counted", "starved", "chunks", "expected"),
    [
        (100, 3, 20, (179, 82)),  # first chunk after 100 ticks: 79 past the start-up
        (195, 3, 20, (195, 3)),  # first chunk within the start-up: nothing added
        (200, 200, 0, (200, 200)),  # never served: every tick starved already
    ],
)
def test_tally_counts_the_wait_past_the_start_up_as_starved(
    counted: int, starved: int, chunks: int, expected: tuple[int, int]
) -> None:
    """200 ticks at 20 Hz with 1.01 s of start-up (ticks 0..20): the ticks a robot waited
    for its first chunk after that count as starved, as in the simulator."""
    spec = RobotSpec(
        robot_id="arm-0",
        control_hz=20.0,
        min_execution_horizon=1,
        max_execution_horizon=10,
        weight=1.0,
        uplink=DelaySpec(),
        downlink=DelaySpec(),
    )
    summary = runtime_summary(num_ticks=200, counted=counted, starved=starved, chunks=chunks)
    robot = SimpleNamespace(age_sum_s=0.0)
    tally = robot_tally(spec, summary, robot, startup_s=1.01)  # type: ignore[arg-type]
    assert (tally.counted_ticks, tally.starved_ticks) == expected


def test_each_robots_uri_names_it_and_declares_its_demand() -> None:
    """A robot's client URI carries its id and what it asks of a GPU (a cluster's front
    door places it by them); an id the front door would refuse as a name is left out."""
    groups = [
        {"name": "arm", "count": 1, "control_hz": 30, "max_execution_horizon": 8},
        {"name": "left arm", "count": 1, "control_hz": 10, "max_execution_horizon": 5},
    ]
    fleet = mixed_fleet("threshold", groups)
    named, spaced = (FleetOptions(port=9000).client(s).uri for s in fleet.robot_specs())
    assert named.startswith("ws://127.0.0.1:9000/?robot=arm-0&control_hz=30")
    assert "max_execution_horizon=8" in named
    assert "robot=" not in spaced and "control_hz=10" in spaced
    assert FleetOptions(port=9000).client().uri == "ws://127.0.0.1:9000"
    # A rate beyond the wire's bounds is not declared (the server refuses that robot).
    (fast,) = mixed_fleet("threshold", [{**groups[0], "control_hz": 20_000}]).robot_specs()
    assert FleetOptions(port=9000).client(fast).uri == "ws://127.0.0.1:9000/?robot=arm-0"
