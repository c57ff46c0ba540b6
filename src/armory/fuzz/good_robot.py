"""The well-behaved robot beside the fuzzing: ``python -m armory.fuzz.good_robot PORT``.

An Armory client on the openpi door at 20 Hz that asks for a chunk every tick, until
its standard input closes. It prints ``ready`` after its first reply, and at the end
one JSON line: the ``time.monotonic`` of every reply and the number of errors it got.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from armory_client import ARMORY_KEY, PolicyClient, RobotState

from armory.fuzz.messages import observation

CONTROL_HZ = 20.0
REQUEST_TIMEOUT_S = 5.0


def run(port: int, stop: threading.Event) -> tuple[list[float], int]:
    """Ask every tick until ``stop``; the reply times and the error count."""
    reply_times_s: list[float] = []
    num_errors = 0
    tick_s = 1.0 / CONTROL_HZ
    with PolicyClient("127.0.0.1", port, request_timeout_s=REQUEST_TIMEOUT_S) as client:
        index = 0
        while not stop.is_set():
            started = time.monotonic()
            state = RobotState(
                robot_id="good",
                action_index=index,
                actions_left=0,
                chunk_start=None if index == 0 else index - 1,
                control_hz=CONTROL_HZ,
                min_execution_horizon=1,
                max_execution_horizon=10,
            )
            try:
                client.infer({**observation(index), ARMORY_KEY: state.to_wire()})
                reply_times_s.append(time.monotonic())
                if len(reply_times_s) == 1:
                    print("ready", flush=True)
            except Exception:
                num_errors += 1
            index += 1
            stop.wait(max(tick_s - (time.monotonic() - started), 0.0))
    return reply_times_s, num_errors


def main() -> None:
    stop = threading.Event()
    result: list[tuple[list[float], int]] = []
    worker = threading.Thread(target=lambda: result.append(run(int(sys.argv[1]), stop)))
    worker.start()
    sys.stdin.read()
    stop.set()
    worker.join()
    reply_times_s, num_errors = result[0] if result else ([], -1)
    print(json.dumps({"reply_times_s": reply_times_s, "num_errors": num_errors}), flush=True)


if __name__ == "__main__":
    main()
