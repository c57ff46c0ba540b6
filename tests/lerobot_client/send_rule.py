"""LeRobot 0.6.1's own RobotClient rule for when to send an observation, on numbers
Armory's test chooses.

Runs in the LeRobot environment (scripts/lerobot-env.sh). Reads a JSON list of
``[queue_size, chunk_size, chunk_size_threshold]`` on stdin (``chunk_size`` -1: no chunk
received yet, as the client starts) and prints, for each, whether
``RobotClient._ready_to_send_observation`` says to send. The client is built without its
``__init__`` (no robot, no connection): only the attributes the rule reads are set.
"""

from __future__ import annotations

import json
import queue
import sys
import threading

from lerobot.async_inference.robot_client import RobotClient


def ready(queue_size: int, chunk_size: int, threshold: float) -> bool:
    client = object.__new__(RobotClient)
    client.action_queue = queue.Queue()
    for step in range(queue_size):
        client.action_queue.put(step)
    client.action_queue_lock = threading.Lock()
    client.action_chunk_size = chunk_size
    client._chunk_size_threshold = threshold
    return bool(client._ready_to_send_observation())


def main() -> None:
    cases = json.load(sys.stdin)
    print(json.dumps([ready(*case) for case in cases]))


if __name__ == "__main__":
    main()
