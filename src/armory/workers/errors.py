"""Worker failures as the server sees them (server side only).

A failure during a batch is a :class:`~armory.core.errors.PolicyError`: the executor
sends its message to every robot of that batch (and nobody else) without retrying,
and the supervisor restarts the worker. A failure at start-up is a
:class:`WorkerStartError`, raised by the policy's ``make()`` before the server listens.

PolicyError
└── WorkerFailed        the worker cannot answer this batch
    ├── WorkerCrashed   it died (or could not be restarted)
    └── WorkerHung      it passed the watchdog deadline and was killed
RuntimeError
├── WorkerStartError    it could not start (missing package, bad checkpoint, timeout)
└── WorkerBatchError    the model raised on this batch; the worker lives on
"""

from __future__ import annotations

from armory.core.errors import PolicyError


class WorkerFailed(PolicyError):
    """The policy worker could not answer this batch; it is being restarted."""


class WorkerCrashed(WorkerFailed):
    """The worker process died during the batch (or could not be restarted)."""


class WorkerHung(WorkerFailed):
    """The worker passed its watchdog deadline; it was killed."""


class WorkerStartError(RuntimeError):
    """The worker could not start; the message holds its reason and stderr's last lines."""


class WorkerBatchError(RuntimeError):
    """The model raised on this batch inside the worker; the executor retries each
    observation alone, so only the robots whose observation breaks the model fail."""
