"""Options of the GR00T ZeroMQ door, importable without pyzmq (``--groot.*``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from armory.transports.groot_adapter import GrootLayout
from armory.transports.groot_protocol import ENCODINGS

if TYPE_CHECKING:
    from armory.engine.server_engine import ServerEngine
    from armory.transports.base import Transport


@dataclass(frozen=True)
class GrootDoorConfig:
    """The GR00T ZeroMQ door of ``armory serve`` (``--groot.*``)."""

    port: int | None = None
    """Port of the ZeroMQ socket (GR00T's default is 5555); None keeps the door closed."""
    api_token: str | None = None
    """Require this ``api_token`` in every request (compared in constant time); unset, the
    server's --api-key is required when one is set."""
    allow_kill: bool = False
    """Let a robot's ``kill`` request stop the server (refused otherwise)."""
    encoding: str = "auto"
    """auto (told apart per request), n1.6 or n1.5."""
    session_timeout_s: float = 60.0
    """Close a robot's session after this long without a request."""
    layout: GrootLayout = field(default_factory=GrootLayout)

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"--groot.encoding must be one of {', '.join(ENCODINGS)}")
        if self.port is not None and not 0 <= self.port <= 65535:
            raise ValueError(f"--groot.port must be in 0..65535, got {self.port}")
        if not self.session_timeout_s > 0:
            raise ValueError("--groot.session-timeout-s must be > 0")

    def door(
        self,
        host: str,
        on_kill: Callable[[], None] | None = None,
        *,
        api_key: str | None = None,
    ) -> Callable[[ServerEngine], Transport]:
        """The factory ``ArmoryServer(doors=...)`` takes; ``api_key`` (the server's) is the
        token required when ``api_token`` is unset."""
        if self.port is None:
            raise ValueError("the GR00T door has no port")
        from armory.transports.groot_zmq import GrootZmqTransport  # needs pyzmq

        return lambda engine: GrootZmqTransport(
            engine, self, host=host, on_kill=on_kill, api_key=api_key
        )
