"""Options of the GR00T ZeroMQ door, importable without pyzmq (``--groot.*``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
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
    n15_port: int | None = None
    """A second ZeroMQ port, answering every request in N1.5's form: for N1.5 robots whose
    flow starts with get_modality_config, beside N1.6 robots on --groot.port (one port
    cannot tell their first request apart, docs/groot.md). None: no second port."""
    session_timeout_s: float = 60.0
    """Close a robot's session after this long without a request."""
    layout: GrootLayout = field(default_factory=GrootLayout)

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"--groot.encoding must be one of {', '.join(ENCODINGS)}")
        for name, port in (("port", self.port), ("n15-port", self.n15_port)):
            if port is not None and not 0 <= port <= 65535:
                raise ValueError(f"--groot.{name} must be in 0..65535, got {port}")
        if self.n15_port and self.n15_port == self.port:
            raise ValueError(f"--groot.n15-port must differ from --groot.port ({self.port})")
        if not self.session_timeout_s > 0:
            raise ValueError("--groot.session-timeout-s must be > 0")

    @property
    def is_open(self) -> bool:
        """Whether a port is set (a door is served)."""
        return self.port is not None or self.n15_port is not None

    def doors(
        self,
        host: str,
        on_kill: Callable[[], None] | None = None,
        *,
        api_key: str | None = None,
    ) -> list[Callable[[ServerEngine], Transport]]:
        """The factories of the door on ``port`` and of the N1.5 one on ``n15_port``, those
        set (see :meth:`door`)."""
        configs = [self] if self.port is not None else []
        if self.n15_port is not None:
            configs.append(replace(self, port=self.n15_port, n15_port=None, encoding="n1.5"))
        return [config.door(host, on_kill, api_key=api_key) for config in configs]

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
