"""armory-client: the robot side of Armory, an openpi-compatible policy client.

`PolicyClient` / `AsyncPolicyClient` speak the openpi WebSocket protocol. What robot
and server must agree on is the subpackage `wire`, which an Armory server imports
too: the byte-compatible msgpack-numpy codec; `RobotState`, the queue state an
Armory client attaches to each observation under `ARMORY_KEY`; `ReplyState`, what an
Armory server answers under the same key. `RobotRuntime` plays an `ActionQueue` at
the robot's control rate and requests chunks in one of the `REQUEST_MODES`.
`merge` holds the chunk merge rules (`MERGE_RULES`, real-time chunking),
`image_prep` resizes, casts and JPEG-encodes camera frames (pillow optional), and
`safety` checks every action before it reaches the motors; the runtime wires all
three in (`RuntimeConfig.merge_rule`, `.safety`, `.prepare_images`). `LeRobotRobot`
drives a LeRobot robot object; ``armory-client plot TRACE`` draws a runtime trace.
"""

from armory_client.action_queue import ActionQueue
from armory_client.client import DEFAULT_MAX_SIZE, DEFAULT_PORT, AsyncPolicyClient, PolicyClient
from armory_client.errors import (
    ArmoryClientError,
    CertificateRejected,
    CodecError,
    ConnectionLost,
    ConnectTimeout,
    HandshakeRejected,
    ProtocolError,
    RequestTimeout,
    ServerError,
)
from armory_client.image_prep import (
    DEFAULT_JPEG_QUALITY,
    ImageSpec,
    encode_jpeg,
    image_specs,
    prepare_images,
    resize_with_pad,
    to_uint8,
)
from armory_client.lerobot_robot import LeRobotRobot
from armory_client.merge import (
    MERGE_RULES,
    IndexedActions,
    Landing,
    MergeResult,
    MergeRule,
    QueueState,
    Rtc,
    RtcRequest,
    TemporalEnsemble,
    make_merge_rule,
    merge_chunk,
    nonfinite_rows,
    rtc_delay_ticks,
    rtc_request,
)
from armory_client.request_modes import (
    REQUEST_MODES,
    ChunkFraction,
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
from armory_client.safety import SafetyConfig, SafetyLayer, SafetyStop
from armory_client.wire.codec import packb, unpackb
from armory_client.wire.queue_state import ARMORY_KEY, WIRE_VERSION, RobotState, attach, detach
from armory_client.wire.reply_state import ACTIONS_KEY, ReplyState, parse_reply

__all__ = [
    "ACTIONS_KEY",
    "ARMORY_KEY",
    "DEFAULT_JPEG_QUALITY",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_PORT",
    "MERGE_RULES",
    "REQUEST_MODES",
    "WIRE_VERSION",
    "ActionQueue",
    "ArmoryClientError",
    "AsyncPolicyClient",
    "CertificateRejected",
    "ChunkFraction",
    "CodecError",
    "ConnectTimeout",
    "ConnectionLost",
    "Directed",
    "EveryTick",
    "HandshakeRejected",
    "ImageSpec",
    "IndexedActions",
    "InferClient",
    "Landing",
    "LeRobotRobot",
    "MergeResult",
    "MergeRule",
    "PolicyClient",
    "ProtocolError",
    "QueueState",
    "ReplyState",
    "RequestMode",
    "RequestRecord",
    "RequestTimeout",
    "Robot",
    "RobotRuntime",
    "RobotState",
    "RoundTripEstimate",
    "Rtc",
    "RtcRequest",
    "RuntimeConfig",
    "RuntimeStats",
    "RuntimeSummary",
    "SafetyConfig",
    "SafetyLayer",
    "SafetyStop",
    "SendState",
    "ServerError",
    "TemporalEnsemble",
    "Threshold",
    "TickRecord",
    "attach",
    "detach",
    "encode_jpeg",
    "image_specs",
    "make_merge_rule",
    "make_request_mode",
    "merge_chunk",
    "nonfinite_rows",
    "packb",
    "parse_reply",
    "prepare_images",
    "resize_with_pad",
    "rtc_delay_ticks",
    "rtc_request",
    "to_uint8",
    "unpackb",
]
