"""Prometheus metrics at /metrics over a real socket: families, values of a scripted run,
the bound on robot labels, the API key."""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import grpc
import msgpack
import pytest
from armory_client import PolicyClient, RobotState, ServerError, attach
from groot_client import GrootClient, groot_observation
from lerobot_client.wire import (
    AsyncInferenceClient,
    TimedObservation,
    install_upstream_classes,
    instructions,
    raw_observation,
    robot_features,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from server_harness import make_mock, make_obs, running_server

from armory.engine.config import ServerConfig
from armory.observe.metrics import EngineReading, ServerMetrics
from armory.observe.robot_activity import RobotSample
from armory.serve import ArmoryServer, ServerThread
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.lerobot_grpc import LeRobotDoorConfig
from armory.transports.lerobot_protocol import decode_actions

MAX_EXECUTION_HORIZON = 8
GRAFANA = Path(__file__).parents[1] / "configs" / "grafana" / "armory.json"


def scrape(port: int, *, auth: str | None = None) -> dict[str, list[Sample]]:
    """``/metrics`` parsed by Prometheus' own text parser: samples by family name."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if auth is not None:
        request.add_header("Authorization", auth)
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(samples: list[Sample], name: str, **labels: str) -> float:
    """The value of the one sample called ``name`` whose labels include ``labels``."""
    found = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) == 1, (name, labels, samples)
    return found[0]


def state(name: str, index: int, left: int, chunk_start: int | None, step: int) -> RobotState:
    return RobotState(
        robot_id=name,
        action_index=index,
        actions_left=left,
        chunk_start=chunk_start,
        control_hz=20.0,
        min_execution_horizon=2,
        max_execution_horizon=MAX_EXECUTION_HORIZON,
        observation_step=step,
        weight=2.0 if name == "heavy" else 1.0,
    )


def play(
    client: PolicyClient, name: str, lefts: list[int], *, seed: int, pause_s: float = 0.0
) -> None:
    """Requests of one Armory robot, each with ``actions_left`` from ``lefts``; it moves 4
    actions per request, ``pause_s`` apart."""
    index, chunk_start = 0, None
    for step, left in enumerate(lefts):
        time.sleep(pause_s if step else 0.0)
        client.infer(attach(make_obs(seed, step), state(name, index, left, chunk_start, step)))
        chunk_start = index
        index += 4


@pytest.fixture
def clients() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def test_scripted_run_carries_every_family_with_its_values(clients: ExitStack) -> None:
    """Two robots' requests, one refused request: the counters, the per-robot gauges and the
    histograms agree with what was sent and with /stats."""
    with running_server(max_batch_size=4) as server:
        heavy = clients.enter_context(PolicyClient("127.0.0.1", server.port))
        light = clients.enter_context(PolicyClient("127.0.0.1", server.port))
        play(heavy, "heavy", [0, 5, 3], seed=1)
        play(light, "light", [0, 6], seed=2)
        bad = PolicyClient("127.0.0.1", server.port)
        with pytest.raises(ServerError):
            bad.infer({"not an input": 1.0})
        bad.close()
        families = scrape(server.port)
        stats = server.stats()

    requests = families["armory_requests"]
    assert value(requests, "armory_requests_total", door="openpi") == 5 + 1
    errors = families["armory_request_errors"]
    assert sum(s.value for s in errors) == 1
    assert errors[0].labels["door"] == "openpi" and errors[0].labels["kind"].endswith("Error")
    assert value(families["armory_replies"], "armory_replies_total", kind="chunk") == 5

    per_robot = families["armory_robot_requests"]
    assert value(per_robot, "armory_robot_requests_total", robot="heavy") == 3
    assert value(per_robot, "armory_robot_requests_total", robot="light") == 2
    depth = families["armory_robot_queue_depth_actions"]
    assert value(depth, "armory_robot_queue_depth_actions", robot="heavy") == 3
    assert value(depth, "armory_robot_queue_depth_actions", robot="light") == 6
    latency = families["armory_robot_chunk_latency_seconds"]
    assert value(latency, "armory_robot_chunk_latency_seconds_count", robot="heavy") == 3
    assert value(latency, "armory_robot_chunk_latency_seconds_sum", robot="heavy") > 0
    age = families["armory_robot_observation_age_seconds"]
    assert value(age, "armory_robot_observation_age_seconds_count", robot="light") == 2
    for sample in families["armory_robot_starvation_ratio"]:
        assert 0.0 <= sample.value <= 1.0

    batches = families["armory_batch_size"]
    assert value(batches, "armory_batch_size_count") == stats.num_batches
    sizes = sum(b * n for b, n in stats.batch_size_counts.items())
    assert value(batches, "armory_batch_size_sum") == sizes == 5
    assert value(batches, "armory_batch_size_bucket", le="4.0") == stats.num_batches
    forward = families["armory_forward_pass_seconds"]
    for size, count in stats.batch_size_counts.items():
        name = "armory_forward_pass_seconds_count"
        assert value(forward, name, batch_size=str(size)) == count
    rules = families["armory_scheduler_decisions"]
    assert {s.labels["rule"]: s.value for s in rules} == stats.decisions_by_rule
    decisions = families["armory_scheduler_decision_seconds"]
    assert value(decisions, "armory_scheduler_decision_seconds_count") == sum(
        stats.decisions_by_rule.values()
    )
    assert value(families["armory_gpu_busy_seconds"], "armory_gpu_busy_seconds_total") == (
        pytest.approx(stats.busy_s)
    )
    assert 0 < value(families["armory_gpu_busy_ratio"], "armory_gpu_busy_ratio") <= 1
    assert value(families["armory_worker_restarts"], "armory_worker_restarts_total") == 0
    assert value(families["armory_robots_connected"], "armory_robots_connected") == 2


def test_robots_beyond_the_label_cap_are_aggregated(clients: ExitStack) -> None:
    """With --server.metrics-max-robots 1, the first robot keeps its label and the others
    are summed under robot="other"."""
    with running_server(max_batch_size=4, metrics_max_robots=1) as server:
        for i, name in enumerate(["first", "second", "third"]):
            client = clients.enter_context(PolicyClient("127.0.0.1", server.port))
            play(client, name, [0, 2 + i], seed=i)
        families = scrape(server.port)
    per_robot = families["armory_robot_requests"]
    assert {s.labels["robot"] for s in per_robot} == {"first", "other"}
    assert value(per_robot, "armory_robot_requests_total", robot="other") == 4
    depth = families["armory_robot_queue_depth_actions"]
    assert value(depth, "armory_robot_queue_depth_actions", robot="other") == (3 + 4) / 2


def test_metrics_need_the_api_key_and_can_be_turned_off() -> None:
    """With an API key /metrics answers 401 (asking a browser for it) without it, and the
    metrics with the Api-Key header or the key as a Basic password; off, it is not served."""
    with running_server(api_key="s3cret") as server:
        with pytest.raises(urllib.error.HTTPError) as refused:
            scrape(server.port)
        refused.value.close()  # an HTTPError holds the answer's socket
        assert refused.value.code == 401
        assert refused.value.headers["WWW-Authenticate"].startswith("Basic")
        assert "armory_requests" in scrape(server.port, auth="Api-Key s3cret")
        basic = base64.b64encode(b"operator:s3cret").decode()
        assert "armory_requests" in scrape(server.port, auth=f"Basic {basic}")
        wrong = base64.b64encode(b"operator:wrong").decode()
        with pytest.raises(urllib.error.HTTPError) as wrong_key:
            scrape(server.port, auth=f"Basic {wrong}")
        wrong_key.value.close()
    with running_server(metrics=False) as server:
        with pytest.raises(urllib.error.HTTPError) as off:
            scrape(server.port)
        off.value.close()
        assert off.value.code != 200
        assert server.stats().robots == []


def test_two_servers_in_one_process_keep_their_own_registries(clients: ExitStack) -> None:
    """Each server's /metrics counts its own requests only."""
    with running_server() as one, running_server() as two:
        play(clients.enter_context(PolicyClient("127.0.0.1", one.port)), "a", [0, 1], seed=0)
        first, second = scrape(one.port), scrape(two.port)
    assert value(first["armory_requests"], "armory_requests_total", door="openpi") == 2
    assert second["armory_requests"] == []


def test_grafana_dashboard_queries_only_exported_series(clients: ExitStack) -> None:
    """Every series configs/grafana/armory.json queries is in a scrape after a short run."""
    dashboard = json.loads(GRAFANA.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"armory_[a-z_]+", target["expr"])
    }
    with running_server() as server:
        robot = clients.enter_context(PolicyClient("127.0.0.1", server.port))
        play(robot, "a", [0, 1, 1], seed=0, pause_s=0.1)
        with PolicyClient("127.0.0.1", server.port) as bad, pytest.raises(ServerError):
            bad.infer({"not an input": 1.0})
        families = scrape(server.port)
    exported = {sample.name for samples in families.values() for sample in samples}
    assert len(queried) >= 14
    assert queried <= exported, queried - exported


def test_worker_restarts_come_from_the_policy() -> None:
    """A policy in a worker process counts its restarts; /metrics and /stats carry them."""
    policy = make_mock()
    policy.num_restarts = 2  # as WorkerPolicy counts them
    with running_server(policy) as server:
        families = scrape(server.port)
        stats = server.stats()
    assert value(families["armory_worker_restarts"], "armory_worker_restarts_total") == 2
    assert stats.num_worker_restarts == 2


def test_the_groot_doors_requests_and_errors_carry_its_name() -> None:
    """A GR00T robot's get_action and a bad frame are counted under door="groot", beside
    the openpi door that serves /metrics."""
    server = ArmoryServer(
        make_mock(),
        ServerConfig(max_batch_size=4),
        port=0,
        doors=[GrootDoorConfig(port=0).door("127.0.0.1")],
    )
    with ServerThread(server) as thread, GrootClient(server.doors[0].port) as client:
        client.get_action(groot_observation(make_obs(1), "n1.6", task="stack the cups"))
        assert "error" in client.send_raw(msgpack.packb({"endpoint": "fly"}))
        families = scrape(thread.port)
        stats = thread.stats()
    assert value(families["armory_requests"], "armory_requests_total", door="groot") == 1
    errors = families["armory_request_errors"]
    assert [(s.labels["door"], s.value) for s in errors] == [("groot", 1.0)]
    assert [row.door for row in stats.robots] == ["groot"]


def test_the_lerobot_doors_requests_errors_and_rows_carry_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A LeRobot robot's observation and its refused one (a joint missing) are counted
    under door="lerobot", and its row and per-robot series are the LeRobot door's."""
    install_upstream_classes(monkeypatch)
    joints = [f"joint_{i}.pos" for i in range(6)]
    cameras = {"front": (224, 224, 3), "wrist": (224, 224, 3)}
    door = LeRobotDoorConfig(
        port=0, allow_unsafe_pickle_on_untrusted_networks=True, actions_wait_s=0.3
    ).door("127.0.0.1")
    policy = make_mock(state_dim=len(joints))
    server = ArmoryServer(policy, ServerConfig(max_batch_size=4), port=0, doors=[door])
    with ServerThread(server) as thread, AsyncInferenceClient(server.doors[0].port) as robot:
        robot.ready()
        robot.send_instructions(instructions(robot_features(joints, cameras)))
        raw = raw_observation(1, joints, cameras)
        robot.send_observation(TimedObservation(1.0, 0, raw, must_go=True))
        deadline_s = time.monotonic() + 10.0
        while not (chunk := robot.get_actions()) and time.monotonic() < deadline_s:
            pass
        assert decode_actions(chunk)
        broken = {k: v for k, v in raw.items() if k != "joint_3.pos"}
        with pytest.raises(grpc.RpcError):
            robot.send_observation(TimedObservation(2.0, 1, broken))
        families = scrape(thread.port)
        stats = thread.stats()
    assert value(families["armory_requests"], "armory_requests_total", door="lerobot") == 1
    errors = families["armory_request_errors"]
    assert [(s.labels["door"], s.labels["kind"], s.value) for s in errors] == [
        ("lerobot", "INVALID_ARGUMENT", 1.0)
    ]
    (row,) = stats.robots
    assert (row.door, row.num_requests, row.num_replies, row.num_errors) == ("lerobot", 1, 1, 1)
    per_robot = families["armory_robot_requests"]
    assert value(per_robot, "armory_robot_requests_total", robot=row.robot) == 1


def test_a_robot_named_like_another_label_joins_the_aggregate() -> None:
    """Robot names are the robots' own: one called "other", or one that repeats a name
    already labelled, is summed under robot="other" so that no two series share a label."""

    def sample(name: str, num_requests: int) -> RobotSample:
        return RobotSample(name, None, None, num_requests, 0, 0.0, 0.0)

    robots = [sample("other", 1), sample("conn-1", 2), sample("conn-1", 4), sample("b", 8)]
    reading = EngineReading(
        uptime_s=1.0,
        busy_s=0.0,
        batch_size_counts={},
        decisions_by_rule={},
        requests_by_door={},
        replies_by_door={},
        errors_by_door={},
        num_worker_restarts=0,
        robots=robots,
    )
    metrics = ServerMetrics(max_batch_size=2, max_robot_labels=8)
    text = metrics.exposition(reading).decode()
    families = {f.name: f.samples for f in text_string_to_metric_families(text)}
    per_robot = families["armory_robot_requests"]
    labels = [s.labels["robot"] for s in per_robot]
    assert sorted(labels) == ["b", "conn-1", "other"]
    assert value(per_robot, "armory_robot_requests_total", robot="conn-1") == 2
    assert value(per_robot, "armory_robot_requests_total", robot="other") == 1 + 4
    assert value(per_robot, "armory_robot_requests_total", robot="b") == 8
