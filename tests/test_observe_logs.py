"""The server's log lines: one per robot connect, disconnect and refused request, one per
batch only with --log-decisions, as text or JSON; none per request at the default level."""

from __future__ import annotations

import json
import logging
import signal
from typing import Any

import pytest
from armory_client import PolicyClient, RobotState, ServerError, attach
from server_harness import armory_serve, make_obs

from armory.observe.logs import JsonFormatter

MOCK = ["policy:mock", "--policy.latency-profile", "linear"]


def run_robot(uri: str, name: str, num_requests: int) -> None:
    """An Armory robot that sends ``num_requests`` observations one after another."""
    with PolicyClient(uri) as client:
        index, chunk_start = 0, None
        for step in range(num_requests):
            state = RobotState(
                robot_id=name,
                action_index=index,
                actions_left=0 if chunk_start is None else 2,
                chunk_start=chunk_start,
                control_hz=20.0,
                min_execution_horizon=2,
                max_execution_horizon=8,
                observation_step=step,
            )
            client.infer(attach(make_obs(step), state))
            chunk_start, index = index, index + 4


def serve_and_run(*options: str, num_requests: int = 3, refused: bool = False) -> list[str]:
    """`armory serve OPTIONS` with one robot's requests (and, if ``refused``, a plain
    client's request the server refuses); the server's log lines."""
    args = ["--port", "0", *options, *MOCK]
    with armory_serve(*args, announce_lines=2) as (proc, (_, door)):
        assert "/healthz, dashboard at http://127.0.0.1:" in door, door
        uri = door.split(" on ", 1)[1].split(" ", 1)[0]
        run_robot(uri, "arm-1", num_requests)
        if refused:
            with PolicyClient(uri) as client, pytest.raises(ServerError):
                client.infer({"not an input": 1.0})
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=10)
        assert proc.returncode == 0, stderr
    return stderr.splitlines()


def test_json_lines_with_decisions() -> None:
    """--log-format json --log-decisions: every line is a JSON object; the robot's connect
    and disconnect and one line per batch carry their fields."""
    lines = [json.loads(line) for line in serve_and_run("--log-format", "json", "--log-decisions")]
    events: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        assert {"time", "level", "logger", "message"} <= line.keys()
        events.setdefault(line.get("event", ""), []).append(line)
    (connect,) = events["connect"]
    assert (connect["robot"], connect["door"], connect["control_hz"]) == ("arm-1", "openpi", 20.0)
    (disconnect,) = events["disconnect"]
    assert disconnect["robot"] == "arm-1" and disconnect["num_requests"] == 3
    batches = events["batch"]
    assert len(batches) == 3
    for batch in batches:
        assert batch["robots"] == ["arm-1"] and batch["size"] == 1
        assert batch["rule"] and batch["predicted_ms"] > 0 and batch["actual_ms"] > 0


def test_text_default_has_no_line_per_request_or_batch() -> None:
    """By default: text lines, the connect and disconnect, nothing per request or batch."""
    lines = serve_and_run(num_requests=5)
    robot_lines = [line for line in lines if "arm-1" in line]
    assert len(robot_lines) == 2, lines
    assert "connected through the openpi door" in robot_lines[0]
    assert "disconnected from the openpi door after 5 requests" in robot_lines[1]
    assert not any("armory.decisions" in line for line in lines)


def test_a_refused_request_is_one_line_naming_its_robot() -> None:
    """A request the server refuses is one line at the default level: the robot, its
    address and the reason; the robot that was served has no such line."""
    lines = serve_and_run(num_requests=2, refused=True)
    refusals = [line for line in lines if "refused" in line]
    assert len(refusals) == 1, lines
    assert "request of conn-" in refusals[0] and "(127.0.0.1:" in refusals[0]
    assert "lacks required input 'observation/image'" in refusals[0], refusals[0]


def test_json_formatter_keeps_extras_and_exceptions() -> None:
    """Fields given with extra= and an exception's traceback land in the JSON object."""
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.makeLogRecord(
            {"msg": "failed %s", "args": ("x",), "levelname": "ERROR", "name": "armory.t"}
        )
        record.exc_info = __import__("sys").exc_info()
    record.robot = "arm-2"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "failed x" and line["robot"] == "arm-2"
    assert "ValueError: boom" in line["exception"]


def test_unknown_log_format_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """--log-format yaml is refused by the command line, naming the choices."""
    from armory.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--log-format", "yaml", *MOCK])
    assert "text" in capsys.readouterr().err
