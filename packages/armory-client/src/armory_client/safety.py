"""The safety layer: every action passes it on its way to the motors.

None of the upstream policy servers or clients checks what the policy asks the arm
to do. `SafetyLayer.filter` is called once per tick with the queue's action (None
on a starved tick) and returns what to send to the motors; its rules, set per robot
in a frozen `SafetyConfig`:

- **Limits clip.** Each dimension is clipped to ``[lower, upper]`` (joint or action
  limits; -inf / inf leave a side open). Off unless given.
- **Jumps stop.** If any dimension would change by more than `max_step` in one tick
  (measured after clipping, against the last action sent), the layer stops the
  robot and raises `SafetyStop`: a jump is never clipped into a smaller jump. Off
  unless given. The first action after construction or `reset` is compared with
  the ``last_action`` given there (e.g. the arm's measured position), else not at all.
- **A dry queue holds.** On a starved tick the layer returns the last action sent
  again (``on_dry="hold"``, the default: a position-controlled arm stays where it
  is), or a configured ``safe_action`` (``"safe-action"``, checked like any action:
  with `max_step` set, a safe action far from the arm stops the robot rather than
  jump there), or nothing (``"nothing"``). For velocity or delta actions holding
  the last one keeps the arm moving: use ``"safe-action"`` with a zero action.
- **Bad actions stop.** An action with NaN or inf, or of the wrong shape, stops the
  robot the same way.
- **E-stop.** `estop` (from any thread, e.g. a button handler) halts playback at
  once: every later `filter` call raises `SafetyStop` until `reset`.

A stop latches: the layer refuses every action until `reset` is called, and
`on_stop` (if given) is called once, with the `SafetyStop`, when it latches (e.g.
to cut motor torque). `SafetyStop` is a RuntimeError, deliberately not an
`ArmoryClientError`, so that handlers of client and network errors never swallow it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import threading
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

__all__ = ["DRY_BEHAVIOURS", "SafetyConfig", "SafetyLayer", "SafetyStop"]

DryBehaviour = Literal["hold", "safe-action", "nothing"]
DRY_BEHAVIOURS: tuple[str, ...] = ("hold", "safe-action", "nothing")
"""The valid `SafetyConfig.on_dry` values."""


class SafetyStop(RuntimeError):
    """The safety layer stopped the robot; it refuses every action until `SafetyLayer.reset`."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"safety stop: {reason}")
        # Why the robot stopped, without the prefix.
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class SafetyConfig:
    """One robot's safety rules (checked on construction); the defaults clip nothing,
    stop on nothing but bad actions and the e-stop, and hold the last action when dry."""

    # Limits
    lower: tuple[float, ...] | None = None
    """Per-dimension lower bounds actions are clipped to (-inf: open); None: no bound."""
    upper: tuple[float, ...] | None = None
    """Per-dimension upper bounds actions are clipped to (inf: open); None: no bound."""
    # Jumps
    max_step: float | tuple[float, ...] | None = None
    """Largest change per tick, one value for every dimension or one per dimension
    (inf: unchecked); a larger change stops the robot. None: no check."""
    # Dry queue
    on_dry: DryBehaviour = "hold"
    """On a starved tick: ``hold`` the last action, send the ``safe-action``, or ``nothing``."""
    safe_action: tuple[float, ...] | None = None
    """The action sent on a starved tick with ``on_dry="safe-action"`` (within the limits)."""

    def __post_init__(self) -> None:
        for name in ("lower", "upper", "safe_action"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _float_tuple(name, value))
        if self.max_step is not None:
            steps = (self.max_step,) if isinstance(self.max_step, numbers.Real) else self.max_step
            checked = _float_tuple("max_step", steps)
            if any(not step > 0 for step in checked):
                raise ValueError(f"max_step must be > 0, got {self.max_step!r}")
            value = checked[0] if isinstance(self.max_step, numbers.Real) else checked
            object.__setattr__(self, "max_step", value)
        self.action_dim  # noqa: B018  (checks that the per-dimension fields agree)
        if self.lower is not None and self.upper is not None:
            pairs = enumerate(zip(self.lower, self.upper, strict=True))
            bad = [i for i, (lo, hi) in pairs if lo > hi]
            if bad:
                raise ValueError(f"lower > upper at dimensions {bad}")
        if self.on_dry not in DRY_BEHAVIOURS:
            valid = ", ".join(DRY_BEHAVIOURS)
            raise ValueError(f"on_dry must be one of {valid}, got {self.on_dry!r}")
        if (self.on_dry == "safe-action") != (self.safe_action is not None):
            raise ValueError("safe_action is given if and only if on_dry is 'safe-action'")
        if self.safe_action is not None:
            safe = np.array(self.safe_action)
            if not np.isfinite(safe).all():
                raise ValueError(f"safe_action must be finite, got {self.safe_action}")
            if not np.array_equal(self.clip(safe), safe):
                raise ValueError(f"safe_action {self.safe_action} is outside the limits")

    @property
    def action_dim(self) -> int | None:
        """The dimensions the per-dimension fields give; None when none does."""
        lengths = {
            name: len(value)
            for name in ("lower", "upper", "max_step", "safe_action")
            if isinstance(value := getattr(self, name), tuple)
        }
        if len(set(lengths.values())) > 1:
            raise ValueError(f"per-dimension fields disagree on the action size: {lengths}")
        return next(iter(lengths.values()), None)

    def clip(self, action: np.ndarray) -> np.ndarray:
        """`action` clipped to the limits (a new array)."""
        lower = -np.inf if self.lower is None else np.asarray(self.lower)
        upper = np.inf if self.upper is None else np.asarray(self.upper)
        return np.clip(action, lower, upper)


class SafetyLayer:
    """Checks one robot's actions before they reach the motors (thread-safe)."""

    def __init__(
        self,
        config: SafetyConfig | None = None,
        *,
        last_action: np.ndarray | Sequence[float] | None = None,
        on_stop: Callable[[SafetyStop], None] | None = None,
    ) -> None:
        self.config = config if config is not None else SafetyConfig()
        self._on_stop = on_stop
        self._lock = threading.RLock()
        self._stop: SafetyStop | None = None
        self._last: np.ndarray | None = None
        # dtype of the actions returned (that of the last action given, float64 at first).
        self._dtype = np.dtype(np.float64)
        # Counters, kept across resets.
        self.num_actions = 0
        """Actions returned for the motors (held and safe actions included)."""
        self.num_clipped = 0
        """Actions changed by the limits."""
        self.num_dry_ticks = 0
        """Calls with no action (starved ticks)."""
        self.reset(last_action=last_action)

    # ---- state ---------------------------------------------------------

    @property
    def stopped(self) -> bool:
        """Whether the layer refuses actions (after a stop or an e-stop, until `reset`)."""
        return self._stop is not None

    @property
    def stop_reason(self) -> str | None:
        """Why the robot stopped; None while it runs."""
        return None if self._stop is None else self._stop.reason

    @property
    def last_action(self) -> np.ndarray | None:
        """A copy of the last action sent (or given to `reset`); None if none."""
        return None if self._last is None else self._last.copy()

    # ---- events --------------------------------------------------------

    def filter(self, action: np.ndarray | Sequence[float] | None) -> np.ndarray | None:
        """Called once per tick with the queue's action, None on a starved tick; returns
        what to send to the motors (None: send nothing).

        Raises SafetyStop, and refuses every later action until `reset`, on a jump
        larger than `max_step`, on NaN or inf, on a wrong shape, or after `estop`.
        """
        with self._lock:
            if self._stop is not None:
                raise SafetyStop(f"{self._stop.reason} (stopped; call reset() to resume)")
            if action is None:
                self.num_dry_ticks += 1
                if self.config.on_dry == "nothing" or (
                    self.config.on_dry == "hold" and self._last is None
                ):
                    return None
                if self.config.on_dry == "hold":
                    assert self._last is not None
                    self.num_actions += 1
                    return self._last.astype(self._dtype)
                action = np.array(self.config.safe_action)
            candidate = self._checked(action, "action")
            clipped = self.config.clip(candidate)
            if not np.array_equal(clipped, candidate):
                self.num_clipped += 1
            self._check_step(clipped)
            self._last = clipped
            self.num_actions += 1
            dtype = getattr(action, "dtype", None)
            if isinstance(dtype, np.dtype) and dtype.kind == "f":
                self._dtype = dtype
            return clipped.astype(self._dtype)

    def estop(self, reason: str = "e-stop") -> None:
        """Halt playback at once (from any thread): every later action is refused until
        `reset`. A second call while stopped changes nothing."""
        with self._lock:
            if self._stop is None:
                self._latch(reason)

    def reset(self, *, last_action: np.ndarray | Sequence[float] | None = None) -> None:
        """Resume after a stop. `last_action` (e.g. the arm's measured position) is what
        the next action's step is measured from; None skips that first check.

        Raises ValueError (and changes nothing) for a `last_action` of the wrong shape or
        not finite.
        """
        last = None
        if last_action is not None:
            last, problem = _as_action(last_action, "last_action", self.config.action_dim)
            if problem is not None:
                raise ValueError(problem)
        with self._lock:
            self._last = last
            self._stop = None

    # ---- checks --------------------------------------------------------

    def _checked(self, action: np.ndarray | Sequence[float], what: str) -> np.ndarray:
        """`action` as a float64 copy, or a stop for a wrong shape or a value not finite."""
        expected = self.config.action_dim if self._last is None else len(self._last)
        array, problem = _as_action(action, what, expected)
        if problem is not None:
            self._raise(problem)
        assert array is not None
        return array

    def _check_step(self, action: np.ndarray) -> None:
        """Stop if `action` moves any dimension further than `max_step` from the last."""
        if self.config.max_step is None or self._last is None:
            return
        step = np.abs(action - self._last)
        limit = np.broadcast_to(np.asarray(self.config.max_step, np.float64), step.shape)
        over = np.flatnonzero(step > limit)
        if len(over):
            moves = ", ".join(
                f"dim {i}: {self._last[i]:.6g} -> {action[i]:.6g} (step {step[i]:.6g} > "
                f"{limit[i]:.6g})"
                for i in over.tolist()
            )
            self._raise(f"jump larger than max_step: {moves}")

    def _raise(self, reason: str) -> None:
        """Latch a stop and raise it."""
        raise self._latch(reason)

    def _latch(self, reason: str) -> SafetyStop:
        """Refuse every action from now on; tell `on_stop` once."""
        self._stop = SafetyStop(reason)
        if self._on_stop is not None:
            self._on_stop(self._stop)
        return self._stop


def _float_tuple(name: str, values: object) -> tuple[float, ...]:
    """`values` as a non-empty tuple of floats (inf allowed, NaN not), or a ValueError."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise ValueError(f"{name} must be a sequence of numbers, got {values!r}")
    try:
        floats = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a sequence of numbers, got {values!r}") from None
    if not floats or any(math.isnan(v) for v in floats):
        raise ValueError(f"{name} must be a non-empty sequence of numbers (no NaN), got {values!r}")
    return floats


def _as_action(
    action: object, what: str, expected_dim: int | None
) -> tuple[np.ndarray | None, str | None]:
    """(`action` as a float64 copy, None), or (None, what is wrong with it): not a 1-D
    numeric array (bools and strings do not count), not `expected_dim` long, not finite."""
    try:
        array = np.array(action)
    except (TypeError, ValueError):
        array = None
    if array is None or array.dtype.kind not in "iuf" or array.ndim != 1:
        shape = getattr(action, "shape", None) or type(action).__name__
        return None, f"{what} must be a 1-D numeric array, got {shape}"
    if expected_dim is not None and len(array) != expected_dim:
        return None, f"{what} has {len(array)} dimensions, expected {expected_dim}"
    array = array.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(array))
    if len(bad):
        return None, f"{what} holds NaN or inf at dimensions {bad.tolist()}"
    return array, None
