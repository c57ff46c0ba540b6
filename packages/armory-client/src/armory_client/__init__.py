"""armory-client: the robot side of Armory, an openpi-compatible policy client.

`PolicyClient` / `AsyncPolicyClient` speak the openpi WebSocket protocol with the
byte-compatible msgpack-numpy codec in `codec`; `RobotState` is the queue state an
Armory client attaches to each observation under `ARMORY_KEY`.
"""

from armory_client.client import DEFAULT_MAX_SIZE, DEFAULT_PORT, AsyncPolicyClient, PolicyClient
from armory_client.codec import packb, unpackb
from armory_client.errors import (
    ArmoryClientError,
    CodecError,
    ConnectionLost,
    ConnectTimeout,
    HandshakeRejected,
    ProtocolError,
    RequestTimeout,
    ServerError,
)
from armory_client.queue_state import ARMORY_KEY, WIRE_VERSION, RobotState, attach, detach

__all__ = [
    "ARMORY_KEY",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_PORT",
    "WIRE_VERSION",
    "ArmoryClientError",
    "AsyncPolicyClient",
    "CodecError",
    "ConnectTimeout",
    "ConnectionLost",
    "HandshakeRejected",
    "PolicyClient",
    "ProtocolError",
    "RequestTimeout",
    "RobotState",
    "ServerError",
    "attach",
    "detach",
    "packb",
    "unpackb",
]
