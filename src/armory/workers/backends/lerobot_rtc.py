"""Real-time chunking for the ``lerobot`` backend, through LeRobot's own RTC guidance.

A flow policy of :data:`RTC_TYPES` denoises with LeRobot's ``RTCProcessor`` wrapped
around each denoising step (``rtc_config`` on the policy's config): every step's
velocity is corrected by autograd towards the robot's previous plan
(``prev_chunk_left_over``), row i weighted by the prefix schedule's weight for
``inference_delay`` d and ``execution_horizon``. What reaches the worker per robot is
the server's :func:`~armory.policies.rtc_guidance.rtc_guidance` of its request (the
entries :data:`~armory.workers.wire.RTC_PREVIOUS`, ``RTC_DELAY``,
``RTC_EXECUTION_HORIZON``, checked on the server); here:

- **One LeRobot call per guidance.** LeRobot takes one ``inference_delay`` and one
  ``execution_horizon`` per ``predict_action_chunk`` (its prefix weights are shared by
  the batch), and a robot without a previous plan cannot share a guided call (its
  correction would pull it towards a plan it does not have). :func:`guidance_groups`
  splits a batch into one group per (d, horizon), plus one of the plain requests.
- **Normalised space.** The robot's plan is in its own units (what the postprocessor's
  unnormaliser gave it); LeRobot compares it with the model's own, normalised output.
  :class:`ModelSpacePlans` runs it through the preprocessor's action normaliser (the
  step LeRobot's RTC rollout uses), as a (batch, rows, action_dim) tensor; LeRobot pads
  it to the model's padded action width.
- **Autograd.** The guided call runs under ``torch.no_grad`` (which LeRobot's
  guidance lifts with ``enable_grad``), never ``inference_mode``, whose tensors
  autograd refuses.

Policies trained on relative actions (``use_relative_actions``) would need the plan
re-expressed against each robot's state: refused at start-up, as are types whose
denoiser does not go through LeRobot's ``RTCProcessor``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from armory.workers.wire import RTC_DELAY, RTC_EXECUTION_HORIZON, RTC_PREVIOUS

RTC_TYPES = frozenset({"pi0", "pi05", "smolvla"})
"""Types whose ``predict_action_chunk`` denoises through LeRobot's ``RTCProcessor``
(``euler_integrate`` with ``prev_chunk_left_over``, ``inference_delay``,
``execution_horizon``)."""

GuidanceKey = tuple[int, int] | None
"""(d, execution horizon) of a guided group; None for the plain requests."""


def enable_rtc(
    policy: Any,
    config: Any,
    *,
    schedule: str,
    execution_horizon: int | None,
    max_guidance_weight: float,
) -> None:
    """Turn on LeRobot's RTC guidance for ``policy`` (its ``rtc_config``, then its own
    ``init_rtc_processor``). ValueError, naming the reason, for a policy that cannot."""
    from lerobot.configs import RTCAttentionSchedule
    from lerobot.policies.rtc.configuration_rtc import RTCConfig

    check_rtc_type(config.type)
    if not (
        hasattr(config, "rtc_config")
        and policy.supports_rtc()
        and hasattr(policy, "init_rtc_processor")
    ):
        raise ValueError(
            f"this LeRobot's {config.type!r} policy takes no RTC guidance (rtc_config, "
            "supports_rtc, init_rtc_processor): Armory drives LeRobot 0.6.1's"
        )
    if getattr(config, "use_relative_actions", False):
        raise ValueError(
            "real-time chunking (--policy.rtc-schedule) is not supported for a policy with "
            "use_relative_actions: the robot's plan would have to be re-expressed against "
            "its state"
        )
    try:
        attention = RTCAttentionSchedule[schedule.upper()]
    except KeyError:
        valid = ", ".join(member.name.lower() for member in RTCAttentionSchedule)
        raise ValueError(f"unknown RTC schedule {schedule!r}; valid: {valid}") from None
    config.rtc_config = RTCConfig(
        enabled=True,
        prefix_attention_schedule=attention,
        max_guidance_weight=float(max_guidance_weight),
        execution_horizon=int(execution_horizon or config.chunk_size),
    )
    policy.init_rtc_processor()


def check_rtc_type(policy_type: str) -> None:
    """ValueError unless ``policy_type`` is one of :data:`RTC_TYPES`."""
    if policy_type not in RTC_TYPES:
        raise ValueError(
            f"LeRobot policy type {policy_type!r} has no real-time-chunking guidance Armory "
            f"can drive (--policy.rtc-schedule); types with it: {', '.join(sorted(RTC_TYPES))}"
        )


def guidance_key(obs: Mapping[str, Any]) -> GuidanceKey:
    """The guided group an observation belongs to (None without a previous plan)."""
    if RTC_PREVIOUS not in obs:
        return None
    return int(obs[RTC_DELAY]), int(obs[RTC_EXECUTION_HORIZON])


def guidance_groups(observations: Sequence[Mapping[str, Any]]) -> dict[GuidanceKey, list[int]]:
    """Indices of the batch by :func:`guidance_key`, each group in batch order."""
    groups: dict[GuidanceKey, list[int]] = {}
    for index, obs in enumerate(observations):
        groups.setdefault(guidance_key(obs), []).append(index)
    return groups


class ModelSpacePlans:
    """The robots' previous plans as LeRobot's ``prev_chunk_left_over``: in the
    policy's normalised action space, on its device."""

    def __init__(self, preprocessor: Any, device: Any) -> None:
        from lerobot.processor import NormalizerProcessorStep

        self._device = device
        self._normalizer = next(
            (step for step in preprocessor.steps if isinstance(step, NormalizerProcessorStep)),
            None,
        )
        """The preprocessor's normaliser (None: the policy normalises nothing)."""

    def __call__(self, observations: Sequence[Mapping[str, Any]]) -> Any:
        """(batch, rows, action_dim) float32 tensor of the observations' previous plans."""
        import torch
        from lerobot.processor import TransitionKey, create_transition

        plans = np.stack([np.asarray(obs[RTC_PREVIOUS], np.float32) for obs in observations])
        # Normalised on the CPU, where the preprocessor normalises the state: the step
        # moves its statistics to each tensor's device.
        plan = torch.from_numpy(plans)
        if self._normalizer is not None:
            plan = self._normalizer(create_transition(action=plan))[TransitionKey.ACTION]
        return plan.to(self._device, torch.float32)
