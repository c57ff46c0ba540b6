"""armory cluster on a real Ray: two CPU replicas of policy:mock, robots through two doors
(openpi WebSocket and GR00T ZeroMQ) spread by placement, one replica killed, every robot
served again within a bound, and a replacement replica started by Ray Serve; the cluster
has an API key, so robots get through the front door with it. Then the cluster joining a
Ray head started apart, as across machines (on loopback here)."""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("ray.serve")
pytest.importorskip("zmq")

from armory_client import PolicyClient
from groot_client import GrootClient, groot_observation
from server_harness import FAST_LINEAR, make_obs

from armory.cli import Serve
from armory.cluster.ray_cluster import ClusterConfig, ClusterRunner, ray_host
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
RESTART_S = 120.0
"""Ray Serve starts a replacement replica within this many seconds (about 2 s on an idle
machine; over 60 s with the test's two cores shared by two other busy processes)."""
KEY = "cluster-key"
"""The cluster's API key: robots get through the front door with it (openpi robots on to
their replica with its ticket, GR00T robots with the key as their api_token)."""


@pytest.mark.parametrize(
    ("address", "host"),
    [
        ("127.0.0.1:6379", "127.0.0.1"),
        ("[::1]:6379", "::1"),
        ("ray://127.0.0.1:10001", "127.0.0.1"),
        ("10.0.0.1:6379", "10.0.0.1"),
        ("head.example:6379", "head.example"),
        ("auto", "auto"),
    ],
)
def test_the_host_of_a_ray_address(address: str, host: str) -> None:
    """What decides whether the cluster joins a head in Ray's single-machine mode."""
    assert ray_host(address) == host


def _mock_replica(**options: Any) -> Serve:
    """A replica's server: policy:mock with a fast linear profile, batches of up to 4."""
    return Serve(
        port=0,
        server=ServerConfig(max_batch_size=4),
        policy=MockPolicyConfig(latency_profile="linear", linear=FAST_LINEAR),
        **options,
    )


def _two_replicas(**options: Any) -> ClusterConfig:
    """Two CPU replicas, the front door on a free port, supervised every 0.2 s."""
    return ClusterConfig(
        num_replicas=2,
        cpus_per_replica=0.5,
        port=0,
        supervisor=SupervisorConfig(period_s=0.2, timeout_s=1.0),
        **options,
    )


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


RAY_CURRENT_CLUSTER = "/tmp/ray/ray_current_cluster"
"""Where `ray start` leaves its head's address (until `ray stop`); a plain ``ray.init()``
joins the head it names."""


@contextlib.contextmanager
def _current_cluster(address: str | None) -> Iterator[None]:
    """Within the block RAY_CURRENT_CLUSTER names ``address`` (None: whatever `ray start`
    writes there); after it the file is as it was before."""
    before = None
    if os.path.exists(RAY_CURRENT_CLUSTER):
        with open(RAY_CURRENT_CLUSTER) as current:
            before = current.read()
    if address is not None:
        os.makedirs(os.path.dirname(RAY_CURRENT_CLUSTER), exist_ok=True)
        with open(RAY_CURRENT_CLUSTER, "w") as current:
            current.write(address)
    try:
        yield
    finally:
        if before is None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(RAY_CURRENT_CLUSTER)
        else:
            with open(RAY_CURRENT_CLUSTER, "w") as current:
                current.write(before)


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie awaiting its reaper has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_listening(port: int, head: subprocess.Popen, timeout_s: float) -> None:
    """Until something accepts on 127.0.0.1:``port``; fails if ``head`` ends first."""
    deadline_s = time.monotonic() + timeout_s
    while True:
        assert head.poll() is None, f"ray start ended with {head.returncode}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            assert time.monotonic() < deadline_s, f"no Ray head on port {port}"
            time.sleep(0.2)


def test_cluster_joins_a_ray_head_on_loopback(tmp_path: Any) -> None:
    """`armory cluster --ray-address 127.0.0.1:PORT` joins a head started apart with
    `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head` (docs/scale-out.md), which
    uses Ray's token authentication: robots spread over its two replicas, and every
    listener of the head stays on loopback but Ray Serve's per-replica gRPC; the head's
    processes end with it."""
    auth_mode = os.environ.get("RAY_AUTH_MODE")  # the cluster sets it to join with the token
    try:
        with _current_cluster(None):  # `ray start` writes its head's address there
            _join_loopback_head(tmp_path)
    finally:
        if auth_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = auth_mode


def _join_loopback_head(tmp_path: Any) -> None:
    port = _free_port()
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    command = [ray_bin, "start", "--head", "--block", f"--port={port}"]
    command += ["--node-ip-address=127.0.0.1", "--include-dashboard=false", "--num-cpus=2"]
    # With a token at hand `ray start` enables Ray's token authentication (as a local
    # ray.init does, which writes the token when missing): the cluster must join with it.
    generate = [ray_bin, "get-auth-token", "--generate"]
    subprocess.run(generate, env=env, check=True, capture_output=True, timeout=60)
    with open(tmp_path / "ray-head.log", "wb") as log:
        head = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_listening(port, head, timeout_s=60.0)
        config = _two_replicas(ray_address=f"127.0.0.1:{port}")
        with ClusterRunner(config, _mock_replica()) as cluster:
            robots = [Robot(f"arm-{i}", "openpi", cluster.port) for i in range(4)]
            try:
                for i, robot in enumerate(robots):
                    robot.step(i)
                assert [entry["num_robots"] for entry in cluster.listing()] == [2, 2]
            finally:
                for robot in robots:
                    robot.close()
            replica_pids = {a.pid for a in cluster.addresses() if a}
            on_head = _descendants(head.pid)
            assert replica_pids <= on_head, "the replicas do not run on the joined head"
            listeners = _listeners(on_head)
            assert port in {p for _, p, _ in listeners}, "the head's GCS not seen listening"
            wide = [(host, p, pid) for host, p, pid in listeners if not is_loopback(host)]
            assert sorted(pid for _, _, pid in wide) == sorted(replica_pids), wide
    finally:
        head_pids = _descendants(head.pid)
        head.send_signal(signal.SIGTERM)  # `ray start --block` stops its node on it
        try:
            head.wait(60.0)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
    deadline_s = time.monotonic() + 30.0
    while left := [pid for pid in head_pids if _running(pid)]:
        if time.monotonic() > deadline_s:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"Ray's processes left running after the head: {left}")
        time.sleep(0.2)
    gc.collect()  # Ray's unclosed sockets warn here, under this test's filters


def test_cluster_spreads_robots_and_survives_a_replica_death(tmp_path: Any) -> None:
    """Robots of both doors, holding the cluster's API key, spread over two replicas; after
    one replica is killed every robot is served again within SERVED_AGAIN_S; Ray Serve
    restarts the replica. The cluster starts a Ray of its own although a head's address is
    left on this machine (`ray start` leaves it, and the head may be gone), which a plain
    ``ray.init`` would try to join."""
    with _current_cluster(f"127.0.0.1:{_free_port()}"):
        _spread_and_survive()


def _spread_and_survive() -> None:
    replica = _mock_replica(api_key=KEY, groot=GrootDoorConfig(port=0))
    with ClusterRunner(_two_replicas(num_cpus=2, placement="fluid"), replica) as cluster:
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
