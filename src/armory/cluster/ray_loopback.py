"""A local Ray whose own listeners bind 127.0.0.1.

Ray 2.60 resolves a node address of ``127.0.0.1`` to the machine's reachable
address (``ray.init(_node_ip_address="127.0.0.1")`` does not keep it), and its
C++ servers (GCS, raylet, each worker's core worker) bind 127.0.0.1 only when the
node address is ``127.0.0.1``; otherwise every interface. Ray keeps the loopback
address in its single-machine mode, which ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
selects on every platform. Ray reads that variable when ``ray`` is imported, so
:func:`loopback_ray` sets it for the processes the local Ray starts (they inherit
the environment) and sets Ray's module constant for this process, which may have
imported ``ray`` already; both are put back when the block ends (the node keeps
its address once started).

One listener stays on every interface: each Ray Serve replica's inter-deployment
gRPC server, which Ray Serve binds to ``[::]:0`` with no option (it requires Ray's
token when token authentication is on, Ray 2.60's default). docs/security.md
lists every listener.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch between its single-machine mode ("0": node address 127.0.0.1) and
cluster mode ("1", Linux's default: the machine's address)."""


@contextmanager
def loopback_ray() -> Iterator[None]:
    """Within the block, a local ``ray.init`` starts a node whose address is
    127.0.0.1 (and whose C++ servers, agents and workers listen there)."""
    from ray._private import ray_constants

    saved_env = os.environ.get(SINGLE_MACHINE_ENV)
    saved_constant = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[SINGLE_MACHINE_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_constant
        if saved_env is None:
            os.environ.pop(SINGLE_MACHINE_ENV, None)
        else:
            os.environ[SINGLE_MACHINE_ENV] = saved_env


def machine_address() -> str:
    """The address by which other machines reach this one: what Ray's cluster mode
    would have made the node's address (a replica bound to a wildcard on a loopback
    Ray advertises it to robots)."""
    from ray._private.services import node_ip_address_from_perspective

    return node_ip_address_from_perspective()
