"""armory-client: the robot side of Armory, an openpi-compatible policy client.

`PolicyClient` / `AsyncPolicyClient` speak the openpi WebSocket protocol with the
byte-compatible msgpack-numpy codec in `codec`; `RobotState` is the queue state an
Armory client attaches to each observation under `ARMORY_KEY`, `ReplyState` what an
Armory server answers under the same key. `RobotRuntime` plays an `ActionQueue` at
the robot's control rate and requests chunks in one of the `REQUEST_MODES`.
"""

from armory_client.action_queue import ActionQueue
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
from armory_client.reply_state import ACTIONS_KEY, ReplyState, parse_reply
from armory_client.request_modes import (
    REQUEST_MODES,
    Directed,
    EveryTick,
    RequestMode,
    RoundTripEstimate,
    SendState,
    Threshold,
    make_request_mode,
)
from armory_client.robot import Robot
from armory_client.runtime import InferClient, RobotRuntime, RuntimeConfig
from armory_client.runtime_stats import RequestRecord, RuntimeStats, RuntimeSummary, TickRecord

__all__ = [
    "ACTIONS_KEY",
    "ARMORY_KEY",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_PORT",
    "REQUEST_MODES",
    "WIRE_VERSION",
    "ActionQueue",
    "ArmoryClientError",
    "AsyncPolicyClient",
    "CodecError",
    "ConnectTimeout",
    "ConnectionLost",
    "Directed",
    "EveryTick",
    "HandshakeRejected",
    "InferClient",
    "PolicyClient",
    "ProtocolError",
    "ReplyState",
    "RequestMode",
    "RequestRecord",
    "RequestTimeout",
    "Robot",
    "RobotRuntime",
    "RobotState",
    "RoundTripEstimate",
    "RuntimeConfig",
    "RuntimeStats",
    "RuntimeSummary",
    "SendState",
    "ServerError",
    "Threshold",
    "TickRecord",
    "attach",
    "detach",
    "make_request_mode",
    "packb",
    "parse_reply",
    "unpackb",
]
