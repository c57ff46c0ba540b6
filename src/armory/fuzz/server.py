"""The server under fuzzing, in a process of its own: ``python -m armory.fuzz.server``.

It serves :func:`~armory.fuzz.messages.policy_config`'s mock through all three doors on
free ports of 127.0.0.1 (the LeRobot door with pickle through the allowlisting
unpickler, as every LeRobot user runs it), prints one JSON line with the ports and its
pid, and stops when its standard input closes. A process of its own so that its RSS
is its own and the fuzzing clients do not share its interpreter lock.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from armory.engine.config import ServerConfig
from armory.fuzz.messages import policy_config
from armory.serve import ArmoryServer, ServerThread
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.lerobot_grpc import LeRobotDoorConfig

REQUEST_TIMEOUT_S = 1.0
"""The server's request timeout: a parked request is refused after this long."""


def make_server() -> ArmoryServer:
    """All doors on free ports; short request and session timeouts."""
    return ArmoryServer(
        policy_config().make(),
        ServerConfig(max_batch_size=4, request_timeout_s=REQUEST_TIMEOUT_S),
        host="127.0.0.1",
        port=0,
        doors=[
            GrootDoorConfig(port=0, session_timeout_s=5.0).door("127.0.0.1"),
            LeRobotDoorConfig(
                port=0,
                allow_unsafe_pickle_on_untrusted_networks=True,
                actions_wait_s=0.05,
                session_timeout_s=2.0,
            ).door("127.0.0.1"),
        ],
    )


def main() -> None:
    """Serve until standard input closes."""
    logging.basicConfig(level=logging.CRITICAL)  # refusals are expected by the thousand
    server = make_server()
    with ServerThread(server) as thread:
        groot, lerobot = server.doors
        ports = {"openpi": thread.port, "groot": groot.port, "lerobot": lerobot.port}
        print(json.dumps({"ports": ports, "pid": os.getpid()}), flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
