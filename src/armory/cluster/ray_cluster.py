"""The cluster on Ray Serve: one Armory engine per replica, the front door in front.

:class:`ClusterRunner` starts (or joins) Ray, runs a Ray Serve deployment of
``num_replicas`` :class:`ArmoryReplica` (each builds the server ``armory serve``
would, on ports of its own, and announces its doors to a registry actor), and
serves the :class:`~armory.cluster.front_door.FrontDoor` with its
:class:`~armory.cluster.supervisor.Supervisor` on an event loop of its own. Ray
Serve places the replicas (one GPU each where there are GPUs), checks their health
(``check_health``: the server's thread is alive) and restarts those that die. Robot
traffic never crosses Ray: robots talk to their replica's doors directly.

Ray is imported only here, and only when a cluster starts (``pip install
'armory[cluster]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self
from urllib.parse import urlsplit

from armory.cluster.front_door import FrontDoor
from armory.cluster.ray_loopback import loopback_ray, machine_address
from armory.cluster.replica_table import ReplicaAddress, ReplicaTable
from armory.cluster.supervisor import Supervisor, SupervisorConfig
from armory.core.addresses import is_loopback
from armory.core.latency_profile import LatencyProfile
from armory.engine.config import ServerConfig
from armory.placement.base import ReplicaProfile
from armory.placement.registry import make_placement
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.lerobot_grpc import LeRobotDoorConfig
from armory.transports.tls import server_ssl_context, server_trust

if TYPE_CHECKING:
    from armory.serve import ArmoryServer


class ServerRecipe(Protocol):
    """What a replica builds its server from: ``armory serve``'s options (``cli.Serve``,
    a frozen dataclass that Ray pickles to each replica)."""

    host: str
    port: int | None
    api_key: str | None
    server: ServerConfig
    groot: GrootDoorConfig
    lerobot: LeRobotDoorConfig

    def make_server(self, *, ticket_audience: str | None = None) -> ArmoryServer: ...


logger = logging.getLogger(__name__)

NAMESPACE = "armory"
REGISTRY_NAME = "armory-replica-registry"
APP_NAME = "armory"
LOOPBACK = "127.0.0.1"
API_KEY_ENV = "ARMORY_API_KEY"
_WILDCARDS = ("0.0.0.0", "::", "")
PLACEHOLDER_PROFILE = "l40s-pi05"
"""Latency placement assumes of a replica before it reports the one it learned."""


@dataclass(frozen=True)
class ClusterConfig:
    """How many replicas, on what, placed how, and where the front door listens."""

    num_replicas: int = 2
    gpus_per_replica: float = 0.0
    """GPUs Ray reserves per replica (1 on a GPU machine; 0 runs CPU replicas)."""
    cpus_per_replica: float = 1.0
    placement: str = "fluid"
    host: str = LOOPBACK
    """Address of the front door."""
    port: int = 8000
    """Port of the front door (0 picks a free one)."""
    ray_address: str | None = None
    """Join this Ray cluster (``auto``, or the head's ``host:port``); None starts a
    local one whose node address is 127.0.0.1 (docs/security.md: Ray's listeners)."""
    num_cpus: int | None = None
    """CPUs of a local Ray (default: the machine's)."""
    start_timeout_s: float = 120.0
    """Seconds for Ray, the replicas and their announcements."""
    supervisor: SupervisorConfig = dataclasses.field(default_factory=SupervisorConfig)
    tls_ca_file: str | None = None
    """With TLS on the replicas: the CA (PEM) the front door trusts when it reads them;
    None trusts the system's CAs and the replicas' certificate itself (self-signed)."""

    def __post_init__(self) -> None:
        if self.num_replicas < 1:
            raise ValueError(f"--replicas must be >= 1, got {self.num_replicas}")
        if self.gpus_per_replica < 0 or self.cpus_per_replica < 0:
            raise ValueError("--gpus-per-replica and --cpus-per-replica must be >= 0")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be in 0..65535, got {self.port}")


def ray_host(address: str) -> str:
    """The host of a Ray address (``host:port``, ``[v6]:port``, ``ray://host:port``;
    ``auto`` gives ``auto``)."""
    return urlsplit(address if "://" in address else f"//{address}").hostname or address


def replica_options(serve: ServerRecipe) -> ServerRecipe:
    """A replica's server options: the given ones with every open door on a free port
    (replicas share a machine) and the API key of ``$ARMORY_API_KEY`` made explicit (the
    front door checks it too)."""
    replace = dataclasses.replace
    return replace(
        serve,
        port=0,
        api_key=serve.api_key or os.environ.get(API_KEY_ENV) or None,
        groot=replace(
            serve.groot,
            port=None if serve.groot.port is None else 0,
            n15_port=None if serve.groot.n15_port is None else 0,
        ),
        lerobot=serve.lerobot if serve.lerobot.port is None else replace(serve.lerobot, port=0),
    )


class ArmoryReplica:
    """One replica's engine (the body of the Ray Serve deployment)."""

    def __init__(self, serve: ServerRecipe, advertised_host: str | None = None) -> None:
        import ray

        from armory.serve import ServerThread

        replica_id = uuid.uuid4().hex
        server = serve.make_server(ticket_audience=replica_id)
        self._thread = ServerThread(server).start()
        host = advertised_host or serve.host
        if host in _WILDCARDS:
            host = ray.util.get_node_ip_address()
            if is_loopback(host):  # a local Ray on loopback; robots dial the machine
                host = machine_address()
        doors: dict[str, object] = {}
        for door in server.doors:  # the first of a kind: GR00T's N1.6 port before N1.5's
            doors.setdefault(type(door).__name__, door)
        groot = doors.get("GrootZmqTransport")
        lerobot = doors.get("LeRobotGrpcTransport")
        self.address = ReplicaAddress(
            replica_id=replica_id,
            host=host,
            openpi_port=server.port,
            groot_port=getattr(groot, "port", None),
            lerobot_port=getattr(lerobot, "port", None),
            pid=os.getpid(),
            tls=serve.server.tls,
        )
        registry = ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE)
        ray.get(registry.announce.remote(self.address))

    def check_health(self) -> None:
        """Called by Ray Serve every health-check period: raises if the server's thread
        stopped or its event loop does not answer within 5 s (then Serve restarts it)."""
        if not self._thread.alive:
            raise RuntimeError("the replica's server thread has stopped")
        self._thread.stats()  # read on the server's loop: raises TimeoutError when hung

    def __del__(self) -> None:
        thread = getattr(self, "_thread", None)
        if thread is not None:
            thread.stop()


class ReplicaRegistry:
    """A Ray actor: the doors each replica announced (dead ones included; the
    supervisor tells them apart)."""

    def __init__(self) -> None:
        self._addresses: list[ReplicaAddress] = []

    def announce(self, address: ReplicaAddress) -> None:
        self._addresses.append(address)

    def addresses(self) -> list[ReplicaAddress]:
        return list(self._addresses)


class ClusterRunner:
    """Starts Ray, the replicas and the front door; :meth:`stop` ends them all."""

    def __init__(self, config: ClusterConfig, replica: ServerRecipe) -> None:
        self.config = config
        self.replica = replica_options(replica)
        # Until a replica answers its first probe with the latency it learned.
        table = LatencyProfile.from_preset(PLACEHOLDER_PROFILE).table(replica.server.max_batch_size)
        self._profile = ReplicaProfile(tuple(float(x) for x in table[1:]))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="armory-front-door", daemon=True
        )
        self._started_ray = False
        self._supervision: asyncio.Task[None] | None = None
        self.door: FrontDoor | None = None

    # ---- start and stop -------------------------------------------------

    def start(self) -> Self:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        import ray
        from ray import serve
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )

        config = self.config
        if config.ray_address is None:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            with loopback_ray():
                # "local": a Ray of its own even where `ray start` has left one (or its
                # address file) on this machine, which ray.init would join otherwise.
                ray.init(
                    address="local",
                    num_cpus=config.num_cpus,
                    include_dashboard=False,
                    dashboard_host=LOOPBACK,
                    _node_ip_address=LOOPBACK,
                    namespace=NAMESPACE,
                    configure_logging=False,
                    log_to_driver=False,
                )
            node_address = ray.util.get_node_ip_address()
            if not is_loopback(node_address):
                logger.warning(
                    "Ray's node address is %s, not loopback: Ray's own servers listen on "
                    "every interface (docs/security.md)",
                    node_address,
                )
        else:
            # A head on this machine's loopback (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray
            # start --head`) answers only a driver in Ray's single-machine mode: in cluster
            # mode Ray dials the machine's address instead of 127.0.0.1.
            local = is_loopback(ray_host(config.ray_address))
            # Ray enables its token authentication for a head started where a token
            # exists, but a driver given an explicit address only with RAY_AUTH_MODE set:
            # with a token at hand (and no mode set), join as `ray start` would serve.
            maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
            with loopback_ray() if local else contextlib.nullcontext():
                ray.init(address=config.ray_address, namespace=NAMESPACE, log_to_driver=False)
        self._started_ray = True
        registry = (
            ray.remote(num_cpus=0)(ReplicaRegistry)
            .options(name=REGISTRY_NAME, namespace=NAMESPACE)
            .remote()
        )
        serve.start(proxy_location="Disabled")
        deployment = serve.deployment(
            ArmoryReplica,
            name="armory-replica",
            num_replicas=config.num_replicas,
            ray_actor_options={
                "num_cpus": config.cpus_per_replica,
                "num_gpus": config.gpus_per_replica,
            },
            health_check_period_s=1.0,
            health_check_timeout_s=10.0,
            graceful_shutdown_timeout_s=5.0,
        )
        serve.run(deployment.bind(self.replica), name=APP_NAME, route_prefix=None)

        async def announced() -> list[ReplicaAddress]:
            return await registry.addresses.remote()

        self._thread.start()
        self._call(self._open_door(announced))
        deadline_s = time.monotonic() + config.start_timeout_s
        while self.listing_num_up() < config.num_replicas:
            if time.monotonic() > deadline_s:
                raise TimeoutError(
                    f"{self.listing_num_up()} of {config.num_replicas} replicas up within "
                    f"{config.start_timeout_s} s"
                )
            time.sleep(0.1)

    async def _open_door(self, announced: Any) -> None:
        config = self.config
        placement = make_placement(config.placement, [self._profile] * config.num_replicas)
        self.door = FrontDoor(
            ReplicaTable(config.num_replicas),
            placement,
            host=config.host,
            port=config.port,
            api_key=self.replica.api_key,
            ssl_context=server_ssl_context(self.replica.server),
        )
        await self.door.start()
        supervisor = Supervisor(
            self.door,
            announced,
            dataclasses.replace(
                config.supervisor, max_batch_size=self.replica.server.max_batch_size
            ),
            api_key=self.replica.api_key,
            ssl_context=server_trust(self.replica.server, config.tls_ca_file),
        )
        self._supervision = asyncio.ensure_future(supervisor.run())

    def stop(self) -> None:
        """Stop the front door, the replicas and (if this runner started it) Ray."""
        if self._thread.is_alive():
            self._call(self._close_door())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10.0)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()
        if self._started_ray:
            import ray
            from ray import serve

            try:
                serve.shutdown()
            finally:
                ray.shutdown()
                self._started_ray = False

    async def _close_door(self) -> None:
        if self._supervision is not None:
            self._supervision.cancel()
        if self.door is not None:
            await self.door.stop()

    # ---- reading the door's state (from any thread) ----------------------

    def _call(self, coroutine: Any, timeout_s: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    def listing(self) -> list[dict[str, object]]:
        """The front door's slots (:meth:`FrontDoor.listing`)."""

        async def read() -> list[dict[str, object]]:
            return self.door.listing() if self.door else []

        return self._call(read())

    def listing_num_up(self) -> int:
        """Replicas up, as the front door knows them (:attr:`ReplicaTable.num_up`)."""

        async def read() -> int:
            return self.door.table.num_up if self.door else 0

        return self._call(read())

    def addresses(self) -> list[ReplicaAddress | None]:
        """Each slot's replica, as the front door knows it."""

        async def read() -> list[ReplicaAddress | None]:
            return list(self.door.table.slots) if self.door else []

        return self._call(read())

    @property
    def port(self) -> int:
        if self.door is None:
            raise RuntimeError("the cluster is not started")
        return self.door.port

    @property
    def uri(self) -> str:
        scheme = "wss" if self.replica.server.tls else "ws"
        return f"{scheme}://{self.config.host}:{self.port}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
