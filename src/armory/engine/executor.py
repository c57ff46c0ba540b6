"""Runs the policy off the event loop: one worker thread, one batch at a time.

The event loop hands a batch to :meth:`Executor.start` (or awaits
:meth:`Executor.run`) and keeps receiving,
decoding and scheduling while the worker computes it. A batch whose forward
pass raises is retried one observation at a time, so an observation that passes
validation but breaks the model costs only its own robot an error; a policy that
returns the wrong number or shape of chunks fails the whole batch (the policy is
at fault, not a robot). A chunk holding NaN or inf is never sent: its robot alone
gets an error naming the policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from armory.core.errors import PolicyError
from armory.policies.base import Policy

logger = logging.getLogger(__name__)

_MAX_MESSAGE_CHARS = 300


@dataclass(frozen=True)
class BatchOutcome:
    """What one batch produced."""

    chunks: list[np.ndarray | PolicyError]
    """Per observation, in order: its (action_horizon, action_dim) float32 chunk, or the
    error its robot is sent."""
    policy_s: float
    """Seconds the worker spent in ``infer_batch`` (all retries included)."""
    ok: bool
    """The batch ran as one forward pass (its time may teach the latency profile)."""


class Executor:
    """Owns the worker thread that calls ``policy.infer_batch``."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        meta = policy.metadata
        self._shape = (meta.action_horizon, meta.action_dim)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="armory-infer")

    def start(
        self,
        observations: Sequence[Mapping[str, Any]],
        on_done: Callable[[BatchOutcome | BaseException], None],
    ) -> Future[None]:
        """Hand one batch to the worker thread now (from the event loop); ``on_done`` is
        called on the loop with its outcome (or what the worker raised) as soon as it is
        computed, in the loop step that wakes for it. Batches run in the order they were
        handed over; the returned future's ``cancel()`` takes a batch back if the worker
        has not started it (``on_done`` is then never called)."""
        loop = asyncio.get_running_loop()
        batch = list(observations)

        def work() -> None:
            outcome: BatchOutcome | BaseException
            try:
                outcome = self._run_sync(batch)
            except BaseException as exc:
                outcome = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(on_done, outcome)

        return self._pool.submit(work)

    async def run(self, observations: Sequence[Mapping[str, Any]]) -> BatchOutcome:
        """Compute one batch in the worker thread (:meth:`start`, awaited); the event loop
        stays free meanwhile."""
        future: asyncio.Future[BatchOutcome] = asyncio.get_running_loop().create_future()

        def resolve(outcome: BatchOutcome | BaseException) -> None:
            if future.done():  # the caller stopped waiting
                return
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

        self.start(observations, resolve)
        return await future

    def shutdown(self) -> None:
        """Called once when the server stops; waits for a running batch to finish."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.policy.close()

    # ---- worker thread -------------------------------------------------

    def _run_sync(self, observations: list[Mapping[str, Any]]) -> BatchOutcome:
        started = time.perf_counter()
        try:
            chunks = self._infer(observations)
        except PolicyError as exc:
            return BatchOutcome([exc] * len(observations), time.perf_counter() - started, False)
        except Exception as exc:
            logger.exception("policy failed on a batch of %d", len(observations))
            if len(observations) == 1:
                error = PolicyError(_failure_message(exc))
                return BatchOutcome([error], time.perf_counter() - started, False)
            return self._one_by_one(observations, started)
        return BatchOutcome(list(chunks), time.perf_counter() - started, True)

    def _one_by_one(self, observations: list[Mapping[str, Any]], started: float) -> BatchOutcome:
        """Retry each observation alone, so only those that fail get an error."""
        results: list[np.ndarray | PolicyError] = []
        for obs in observations:
            try:
                results.append(self._infer([obs])[0])
            except PolicyError as exc:
                results.append(exc)
            except Exception as exc:
                logger.exception("policy failed on a single observation")
                results.append(PolicyError(_failure_message(exc)))
        return BatchOutcome(results, time.perf_counter() - started, False)

    def _infer(self, observations: list[Mapping[str, Any]]) -> list[np.ndarray | PolicyError]:
        """The batch's chunks; a chunk holding NaN or inf becomes an error to its robot
        alone (it is never sent)."""
        chunks = self.policy.infer_batch(observations)
        if not isinstance(chunks, list | tuple) or len(chunks) != len(observations):
            got = len(chunks) if isinstance(chunks, list | tuple) else type(chunks).__name__
            raise PolicyError(
                f"the policy returned {got} chunks for {len(observations)} observations"
            )
        out = []
        for chunk in chunks:
            array = np.asarray(chunk)
            if array.shape != self._shape or array.dtype.kind not in "fiu":
                raise PolicyError(
                    f"the policy returned a chunk of shape {array.shape} and dtype "
                    f"{array.dtype.name}; it declared {self._shape} float32"
                )
            array = np.ascontiguousarray(array, dtype=np.float32)
            out.append(array if np.isfinite(array).all() else self._nonfinite(array))
        return out

    def _nonfinite(self, chunk: np.ndarray) -> PolicyError:
        """The error a robot gets instead of a chunk holding NaN or inf."""
        rows = np.flatnonzero(~np.isfinite(chunk).all(axis=1)).tolist()
        name = self.policy.metadata.name
        logger.warning("policy %s returned NaN or inf in rows %s of a chunk", name, rows)
        return PolicyError(
            f"the policy {name!r} returned a chunk with NaN or inf in rows {rows} of "
            f"{len(chunk)}; it was not sent"
        )


def _failure_message(exc: Exception) -> str:
    """The exception's type and message, shortened; never a traceback."""
    detail = " ".join(f"{type(exc).__name__}: {exc}".split())
    if len(detail) > _MAX_MESSAGE_CHARS:
        detail = detail[: _MAX_MESSAGE_CHARS - 3] + "..."
    return f"the policy failed on this observation ({detail})"
