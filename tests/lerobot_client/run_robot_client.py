"""Run LeRobot's own, unmodified ``RobotClient`` (lerobot 0.6.1) for a while against a
policy server, driving :class:`ArmoryMockRobot`; print a JSON summary on stdout.

Runs in the LeRobot environment (scripts/lerobot-env.sh), from any folder (LeRobot
writes a ``logs/`` folder into the working directory):

    $ARMORY_LEROBOT_PYTHON tests/lerobot_client/run_robot_client.py \
        --server 127.0.0.1:8080 --seconds 5 --calibration-dir /tmp/calib

The summary: ``actions`` (every action the robot executed, joint values in order),
``action_times_s`` (when each was executed, seconds from the start of the control
loop), ``stopped_s`` (when the control loop was stopped, likewise), ``num_observations``
(observations the robot took) and ``started`` (whether the client's handshake and
policy instructions went through).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from armory_mock_robot import ArmoryMockRobotConfig
from lerobot.async_inference.configs import RobotClientConfig
from lerobot.async_inference.robot_client import RobotClient


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", required=True, help="host:port of the policy server")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the robot runs")
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--actions-per-chunk", type=int, default=10)
    parser.add_argument("--aggregate", default="latest_only", help="aggregate_fn_name")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pretrained-name-or-path", default="armory/mock")
    parser.add_argument("--calibration-dir", type=Path, required=True)
    args = parser.parse_args()
    robot = ArmoryMockRobotConfig(id=f"mock{args.seed}", seed=args.seed)
    robot.calibration_dir = args.calibration_dir
    config = RobotClientConfig(
        policy_type="act",
        pretrained_name_or_path=args.pretrained_name_or_path,
        robot=robot,
        actions_per_chunk=args.actions_per_chunk,
        task="pick up the cube",
        server_address=args.server,
        fps=args.fps,
        aggregate_fn_name=args.aggregate,
    )
    client = RobotClient(config)
    mock = client.robot
    started = client.start()
    if started:
        receiver = threading.Thread(target=client.receive_actions, daemon=True)
        control = threading.Thread(
            target=client.control_loop, kwargs={"task": config.task}, daemon=True
        )
        receiver.start()
        control.start()
        control_start_s = time.monotonic()
        time.sleep(args.seconds)
        stopped_s = time.monotonic() - control_start_s
        client.stop()
        control.join(10)
        receiver.join(10)
    else:
        client.stop()
    summary = {
        "started": started,
        "actions": mock.actions,
        "action_times_s": [t - control_start_s for t in mock.action_times_s] if started else [],
        "stopped_s": stopped_s if started else 0.0,
        "num_observations": mock.num_observations,
    }
    print(json.dumps(summary), flush=True)
    return 0 if started else 1


if __name__ == "__main__":
    sys.exit(main())
