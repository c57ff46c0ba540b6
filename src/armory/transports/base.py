"""The Transport interface: one front door of the server, a thin adapter over the engine."""

from __future__ import annotations

import abc


class Transport(abc.ABC):
    """Decodes a wire protocol into engine calls and encodes the engine's replies."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Called once, after the engine started: bind and start accepting robots."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Called once when the server stops: stop accepting, close every connection."""

    @property
    def requires_credentials(self) -> bool:
        """Whether a caller must show a key (or come from an allowed address); read at
        start-up to warn about a door that serves anyone."""
        return False
