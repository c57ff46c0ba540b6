"""armory serve: a door whose port is taken is named in one line, for every door."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from armory.transports.listen import ListenError, check_free


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another socket listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize(
    ("flag", "door", "address"),
    [
        ("--port", "openpi", "127.0.0.1:{port}"),
        ("--groot.port", "GR00T", "tcp://127.0.0.1:{port}"),
        ("--lerobot.port", "LeRobot", "127.0.0.1:{port}"),
    ],
)
def test_a_taken_port_names_its_door_in_one_line(
    taken_port: int, flag: str, door: str, address: str
) -> None:
    """Run as a program, serve exits 2 with one line naming the door and its address, and no
    traceback or library log line."""
    args = ["serve", "--port", "0", flag, str(taken_port), "--log-level", "ERROR"]
    result = subprocess.run(
        [sys.executable, "-m", "armory.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    where = address.format(port=taken_port)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"armory: error: cannot serve: the {door} door cannot listen on {where}: "
        "Address already in use\n"
    )


def test_check_free_passes_a_free_port_and_port_zero(taken_port: int) -> None:
    """check_free refuses only a port something else holds."""
    check_free("test", "127.0.0.1", 0)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        free_port = free.getsockname()[1]
    check_free("test", "127.0.0.1", free_port)
    with pytest.raises(ListenError, match=f"the test door cannot listen on 127.0.0.1:{taken_port}"):
        check_free("test", "127.0.0.1", taken_port)
