"""Real-time-chunking guidance for policies: the previous plan and how hard to follow it.

A robot using the ``rtc`` merge rule (``armory_client.merge``) sends, beside its
inputs, ``rtc_prefix`` (d actions it plays whatever the reply), ``rtc_remainder``
(the rest of its queue: the old plan) and ``rtc_delay`` (d). A policy honours them
in one of two ways:

- **Hard inpainting**: the chunk's first d rows are the prefix and the rest joins
  it without a seam (``policy:mock``'s default, ``mock.inpaint_prefix``).
- **Soft masking** (LeRobot's RTC ``prefix_attention_schedule``): each row i of the
  new chunk is pulled towards row i of the previous plan with a weight
  ``prefix_weights(d, execution_horizon, rows, schedule)[i]`` in [0, 1]: 1 for the
  frozen rows, then by schedule

  | schedule | rows ``d .. execution_horizon - 1`` | rows from ``execution_horizon`` |
  | --- | --- | --- |
  | ``zeros`` | 0 | 0 |
  | ``ones`` | 1 | 0 |
  | ``linear`` | from 1 down to 0, endpoints excluded | 0 |
  | ``exp`` | ``w * expm1(w) / (e - 1)`` of the linear ``w`` | 0 |

  numerically LeRobot 0.6.1's ``RTCProcessor.get_prefix_weights``. A flow policy
  uses the weights to guide its denoising (LeRobot's ``prev_chunk_left_over``, the
  previous plan zero-padded to the chunk's rows, with the execution horizon cut to
  its length, as `rtc_guidance` builds it); a policy without a denoiser can blend,
  ``w * previous + (1 - w) * chunk`` (`soft_inpaint`).

Pure numpy; the keys are the wire contract's (`armory_client.wire.rtc_keys`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from armory_client.wire import RTC_DELAY_KEY, RTC_PREFIX_KEY, RTC_REMAINDER_KEY

__all__ = [
    "RTC_SCHEDULES",
    "RtcGuidance",
    "prefix_weights",
    "rtc_guidance",
    "soft_inpaint",
]

RTC_SCHEDULES = ("zeros", "ones", "linear", "exp")
"""Prefix-weight schedules, by name (LeRobot's ``RTCAttentionSchedule``, lower case)."""


def prefix_weights(delay: int, execution_horizon: int, total: int, schedule: str) -> np.ndarray:
    """(total,) float32 weights of the previous plan per chunk row (module docstring).

    Raises ValueError naming a schedule that is not in `RTC_SCHEDULES` or a count < 0.
    """
    if schedule not in RTC_SCHEDULES:
        raise ValueError(f"unknown RTC schedule {schedule!r}; valid: {', '.join(RTC_SCHEDULES)}")
    for name, value in (
        ("delay", delay),
        ("execution_horizon", execution_horizon),
        ("total", total),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    start, end = min(delay, execution_horizon), execution_horizon
    weights = np.zeros(total, np.float64)
    if schedule == "ones":
        weights[:end] = 1.0
    elif schedule in ("linear", "exp"):
        num_ramp = min(end, total) - start
        if num_ramp > 0:
            ramp = np.linspace(1.0, 0.0, num_ramp + 2)[1:-1]
            if schedule == "exp":
                ramp = ramp * np.expm1(ramp) / (math.e - 1)
            weights[start : start + num_ramp] = ramp
    weights[:start] = 1.0
    return weights.astype(np.float32)


@dataclasses.dataclass(frozen=True, eq=False)
class RtcGuidance:
    """What one observation asks of a real-time-chunking policy."""

    previous: np.ndarray
    """(rows, action_dim) float32: the frozen prefix then the remainder, zero-padded
    (cut) to the chunk's rows (LeRobot's ``prev_chunk_left_over``)."""
    weights: np.ndarray
    """(rows,) float32 `prefix_weights`: how hard each row follows `previous`."""
    delay: int
    """d: the frozen rows (``rtc_delay``)."""
    num_previous: int
    """Rows of the previous plan sent (before padding)."""
    execution_horizon: int
    """Rows guided by the previous plan: the configured horizon cut to `num_previous`
    (the ``execution_horizon`` LeRobot's RTC is called with)."""


def rtc_guidance(
    obs: Mapping[str, Any],
    *,
    rows: int,
    action_dim: int,
    schedule: str,
    execution_horizon: int | None = None,
) -> RtcGuidance | None:
    """The guidance an observation's ``rtc_*`` entries ask for a chunk of `rows` rows, or
    None when it sends no previous plan. The execution horizon (default: the whole
    plan sent) is cut to the plan's length, as LeRobot's RTC does.

    Raises ValueError for entries of the wrong width, or an ``rtc_delay`` that is not an
    integer, is longer than the prefix or than the chunk.
    """
    parts = [obs.get(RTC_PREFIX_KEY), obs.get(RTC_REMAINDER_KEY)]
    plans = [np.asarray(p, np.float32) for p in parts if p is not None and len(p)]
    if not plans:
        return None
    for plan in plans:
        if plan.ndim != 2 or plan.shape[1] != action_dim:
            raise ValueError(
                f"rtc_prefix/rtc_remainder must be (n, {action_dim}), got {plan.shape}"
            )
    plan = np.concatenate(plans)
    prefix_rows = 0 if parts[0] is None else len(parts[0])
    delay = _delay(obs.get(RTC_DELAY_KEY, prefix_rows))
    if not 0 <= delay <= prefix_rows:
        raise ValueError(f"rtc_delay {delay} is outside [0, {prefix_rows}] (the prefix's rows)")
    if delay > rows:
        raise ValueError(f"rtc_delay {delay} is longer than the chunk's {rows} rows")
    horizon = len(plan) if execution_horizon is None else min(execution_horizon, len(plan))
    previous = np.zeros((rows, action_dim), np.float32)
    previous[: min(rows, len(plan))] = plan[:rows]
    return RtcGuidance(
        previous=previous,
        weights=prefix_weights(delay, horizon, rows, schedule),
        delay=delay,
        num_previous=len(plan),
        execution_horizon=horizon,
    )


def _delay(value: Any) -> int:
    """``rtc_delay`` as an int: an integer, a NumPy integer or a 0-d integer array
    (ValueError naming it otherwise; a float is refused, not rounded)."""
    array = np.asarray(value)
    if isinstance(value, bool) or array.shape != () or array.dtype.kind not in "iu":
        raise ValueError(f"rtc_delay must be an integer, got {value!r}")
    return int(array)


def soft_inpaint(chunk: np.ndarray, guidance: RtcGuidance | None) -> np.ndarray:
    """``w * previous + (1 - w) * chunk`` row by row (``chunk`` itself without guidance):
    soft masking for a policy without a denoiser to guide."""
    if guidance is None:
        return chunk
    w = guidance.weights[:, None].astype(np.float64)
    blended = w * guidance.previous + (1.0 - w) * chunk.astype(np.float64)
    return blended.astype(chunk.dtype)
