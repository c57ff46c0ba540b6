"""Fixtures for the armory-client tests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _fake_openpi_server import FakeServer, start_server


@pytest.fixture
def fake_server() -> Iterator[Callable[..., FakeServer]]:
    """Factory starting FakeServers (any thread may call it); every one is stopped after."""
    stops: list[Callable[[], None]] = []
    lock = threading.Lock()

    def start(**kwargs: Any) -> FakeServer:
        server, stop = start_server(**kwargs)
        with lock:
            stops.append(stop)
        return server

    yield start
    for stop in stops:
        stop()
