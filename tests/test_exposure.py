"""Start-up warnings for doors that serve anyone while the server is reachable from
other machines (nothing is bound: the server is only built)."""

from __future__ import annotations

from server_harness import make_mock

from armory.serve import ArmoryServer, exposure_warnings
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.lerobot_grpc import LeRobotDoorConfig


def _server(host: str, *, api_key: str | None, allowed: tuple[str, ...] = ()) -> ArmoryServer:
    return ArmoryServer(
        make_mock(),
        host=host,
        port=0,
        api_key=api_key,
        doors=[
            GrootDoorConfig(port=0).door(host, api_key=api_key),
            LeRobotDoorConfig(port=0, allowed_networks=allowed).door(host, api_key=api_key),
        ],
    )


def test_open_doors_beyond_loopback_are_named() -> None:
    """Bound to every interface with no key, each door is warned about; with a key, none;
    a LeRobot allowlist alone counts as a credential."""
    warnings = exposure_warnings(_server("0.0.0.0", api_key=None))
    assert len(warnings) == 3
    assert all("serves anyone" in w and "--api-key" in w for w in warnings)
    assert "GrootZmqTransport" in warnings[1] and "LeRobotGrpcTransport" in warnings[2]
    assert exposure_warnings(_server("0.0.0.0", api_key="k")) == []
    allowlisted = exposure_warnings(_server("gpu-box", api_key=None, allowed=("10.0.0.0/8",)))
    assert len(allowlisted) == 2 and not any("LeRobot" in w for w in allowlisted)


def test_loopback_servers_get_no_warning() -> None:
    """On 127.0.0.1, ::1 or localhost only local programs reach the doors."""
    for host in ("127.0.0.1", "::1", "localhost"):
        assert exposure_warnings(_server(host, api_key=None)) == []
