"""The wire contract between a robot and an Armory server: what both ends must agree on.

- `codec`: msgpack with numpy arrays, byte-compatible with openpi's msgpack_numpy
  (`packb`, `unpackb`, and the decoding bounds `max_items`, `max_maps`);
- `queue_state`: the robot's queue state under the reserved observation key
  `ARMORY_KEY` (`RobotState`, `attach`, `detach`) and the sane range of every number
  in it;
- `reply_state`: what the server answers under the same key (`ReplyState`,
  `parse_reply`);
- `ordering`: replies to pipelined requests leave in request order (`after`);
- `rtc_keys`: the observation keys of a real-time chunking request;
- `placement`: the query by which a robot names itself to a cluster's front door and
  says what it asks of a GPU (`placement_query`).

This subpackage imports nothing but the standard library, numpy, msgpack and the
client's exception tree (`armory_client.errors`): the server depends on it, and it on
nothing of either side's I/O.
"""

from armory_client.errors import CodecError, ProtocolError
from armory_client.wire.codec import max_items, max_maps, packb, unpackb
from armory_client.wire.ordering import after
from armory_client.wire.queue_state import ARMORY_KEY, WIRE_VERSION, RobotState, attach, detach
from armory_client.wire.reply_state import ACTIONS_KEY, ReplyState, parse_reply
from armory_client.wire.rtc_keys import RTC_DELAY_KEY, RTC_PREFIX_KEY, RTC_REMAINDER_KEY

__all__ = [
    "ACTIONS_KEY",
    "ARMORY_KEY",
    "RTC_DELAY_KEY",
    "RTC_PREFIX_KEY",
    "RTC_REMAINDER_KEY",
    "WIRE_VERSION",
    "CodecError",
    "ProtocolError",
    "ReplyState",
    "RobotState",
    "after",
    "attach",
    "detach",
    "max_items",
    "max_maps",
    "packb",
    "parse_reply",
    "unpackb",
]
