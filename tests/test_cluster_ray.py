"""armory cluster on a real Ray: two CPU replicas of policy:mock, robots through two doors
(openpi WebSocket and GR00T ZeroMQ) spread by placement, one replica killed, every robot
served again within a bound, and a replacement replica started by Ray Serve; the cluster
has an API key, so robots get through the front door with it."""

from __future__ import annotations

import gc
import ipaddress
import json
import os
import signal
import time
import urllib.request
from typing import Any

import pytest

pytest.importorskip("ray.serve")
pytest.importorskip("zmq")

from armory_client import PolicyClient
from groot_client import GrootClient, groot_observation
from server_harness import FAST_LINEAR, make_obs

from armory.cli import Serve
from armory.cluster.ray_cluster import ClusterConfig, ClusterRunner
from armory.cluster.supervisor import SupervisorConfig
from armory.core.addresses import is_loopback
from armory.engine.config import ServerConfig
from armory.policies.mock import MockPolicyConfig
from armory.transports.groot_config import GrootDoorConfig

pytestmark = [
    # Ray's own deprecation and resource warnings must not fail a -W error run.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

SERVED_AGAIN_S = 10.0
"""Every robot of a killed replica is answered by another within this many seconds."""
RESTART_S = 60.0
"""Ray Serve starts a replacement replica within this many seconds."""
KEY = "cluster-key"
"""The cluster's API key: robots get through the front door with it (openpi robots on to
their replica with its ticket, GR00T robots with the key as their api_token)."""


class Robot:
    """One robot of either door; asks the front door again when its replica is gone."""

    def __init__(self, name: str, door: str, front_port: int) -> None:
        self.name, self.door, self.front_port = name, door, front_port
        self.openpi: PolicyClient | None = None
        self.groot: GrootClient | None = None
        self.groot_port: int | None = None

    def _place(self) -> int:
        url = f"http://127.0.0.1:{self.front_port}/place?robot={self.name}&door=groot"
        request = urllib.request.Request(url, headers={"Authorization": f"Api-Key {KEY}"})
        with urllib.request.urlopen(request, timeout=5) as response:
            doors = json.loads(response.read())["doors"]
        return int(doors["groot"].rsplit(":", 1)[1])

    def step(self, seed: int) -> None:
        """One observation answered (raises when it is not)."""
        if self.door == "openpi":
            if self.openpi is None:
                uri = f"ws://127.0.0.1:{self.front_port}/?robot={self.name}"
                self.openpi = PolicyClient(
                    uri, api_key=KEY, request_timeout_s=3.0, connect_timeout_s=3.0
                )
            assert self.openpi.infer(make_obs(seed))["actions"].shape[0] > 0
            return
        if self.groot is None:
            self.groot_port = self._place()
            self.groot = GrootClient(self.groot_port, api_token=KEY, timeout_ms=2000)
        try:
            actions, _ = self.groot.get_action(groot_observation(make_obs(seed), "n1.6"))
        except Exception:
            self.groot.close()  # a REQ socket that lost its reply is unusable
            self.groot = None
            raise
        assert actions["joints"].shape[0] > 0

    def close(self) -> None:
        if self.openpi is not None:
            self.openpi.close()
        if self.groot is not None:
            self.groot.close()


def _served_again(robot: Robot, seed: int, deadline_s: float) -> float:
    """Seconds until the robot is answered again (retrying), failing past the deadline."""
    start_s = time.monotonic()
    while True:
        try:
            robot.step(seed)
            return time.monotonic() - start_s
        except Exception as exc:  # the client's errors, zmq's, or no chunk yet
            if time.monotonic() > deadline_s:
                raise AssertionError(f"{robot.name} not served again: {exc}") from exc
            time.sleep(0.1)


def _descendants(root_pid: int) -> set[int]:
    """``root_pid`` and every process under it (Ray's GCS, raylet, agents, workers)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # ended while listed
    found = {root_pid}
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in found} - found
        found |= children
        grew = bool(children)
    return found


def _proc_address(hex_address: str) -> str:
    """A /proc/net/tcp{,6} address (32-bit words in host order) as text."""
    raw = bytes.fromhex(hex_address)
    packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(packed))


def _listeners(pids: set[int]) -> list[tuple[str, int, int]]:
    """Listening TCP sockets of ``pids``, IPv4 and IPv6: (address, port, pid)."""
    owners: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    owners[target[8:-1]] = pid
        except OSError:
            continue  # ended while listed
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and inode in owners:  # 0A: LISTEN
                    address, port = local.split(":")
                    found.append((_proc_address(address), int(port, 16), owners[inode]))
    return found


def test_cluster_spreads_robots_and_survives_a_replica_death(tmp_path: Any) -> None:
    """Robots of both doors, holding the cluster's API key, spread over two replicas; after
    one replica is killed every robot is served again within SERVED_AGAIN_S; Ray Serve
    restarts the replica."""
    replica = Serve(
        port=0,
        api_key=KEY,
        server=ServerConfig(max_batch_size=4),
        groot=GrootDoorConfig(port=0),
        policy=MockPolicyConfig(latency_profile="linear", linear=FAST_LINEAR),
    )
    config = ClusterConfig(
        num_replicas=2,
        cpus_per_replica=0.5,
        num_cpus=2,
        port=0,
        placement="fluid",
        supervisor=SupervisorConfig(period_s=0.2, timeout_s=1.0),
    )
    with ClusterRunner(config, replica) as cluster:
        addresses = cluster.addresses()
        assert all(a is not None and a.host == "127.0.0.1" for a in addresses)
        robots = [Robot(f"arm-{i}", "openpi", cluster.port) for i in range(4)]
        robots += [Robot(f"groot-{i}", "groot", cluster.port) for i in range(2)]
        try:
            for i, robot in enumerate(robots):
                robot.step(i)
            listing = cluster.listing()
            assert [entry["num_robots"] for entry in listing] == [3, 3]
            replica_pids = {a.pid for a in addresses if a}
            listeners = _listeners(_descendants(os.getpid()) | replica_pids)
            print("\n".join(map(str, sorted(listeners))))
            assert cluster.port in {port for _, port, _ in listeners}, "no door seen listening"
            wide = [(host, port, pid) for host, port, pid in listeners if not is_loopback(host)]
            # Ray's own servers follow the loopback node address; the one listener Ray
            # Serve binds to [::] with no option is each replica's inter-deployment gRPC.
            assert sorted(pid for _, _, pid in wide) == sorted(replica_pids), wide
            victim = addresses[0]
            assert victim is not None
            os.kill(victim.pid, signal.SIGKILL)
            killed_s = time.monotonic()
            waits = [
                _served_again(robot, 100 + i, killed_s + SERVED_AGAIN_S)
                for i, robot in enumerate(robots)
            ]
            print(f"served again after {time.monotonic() - killed_s:.2f} s (each: {waits})")
            assert time.monotonic() - killed_s < SERVED_AGAIN_S
            while cluster.listing_num_up() < 2:
                assert time.monotonic() - killed_s < RESTART_S, "no replacement replica"
                time.sleep(0.2)
            replacement = cluster.addresses()[0]
            assert replacement is not None and replacement.replica_id != victim.replica_id
        finally:
            for robot in robots:
                robot.close()
    gc.collect()  # Ray's unclosed sockets warn here, under this test's filters
