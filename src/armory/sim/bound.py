"""The starvation bound: the least starvation a scheduler can reach on a fleet.

It comes from the fluid relaxation of the fleet (:mod:`armory.scheduling.fluid`): the
most actions per second the robots could execute, with every robot's links at
the smallest delays they can produce. docs/scheduling.md derives the constraints
and states their one assumption: a robot's request windows do not overlap
(a scheduler that pipelines requests for one robot while the GPU idles can beat
it; on GPU-bound fleets none does).

A streaming robot's forward pass and downlink are drawn after its batch is formed,
whatever the scheduler chose, so its chunks are also charged the ticks a window of the
least uplink, the forward pass and the downlink holds on average.

A chunk-fraction robot (LeRobot's rule) streams only while its queue is short: its
observations are some of a streaming robot's, so it is charged as one.

In threshold and directed modes a robot has one request in flight, so its windows
never overlap, and each window is charged the ticks its links and forward pass
hold on average (the delays are drawn after the robot decides to send, whatever the
scheduler does), and the chunk-start spacing of ``min_execution_horizon`` adds the
fluid's fourth constraint. A threshold client asks a round trip and its margin ahead,
and no round trip is shorter than the links and a forward pass at their least, so on
average it holds at least :meth:`RobotClasses.threshold_asks_ahead` actions when it
asks, and each chunk adds at most the rest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from armory.core.latency_profile import LatencyProfile
from armory.fleet_spec import DelaySpec, FleetSpec, RequestMode, RobotSpec
from armory.scheduling.fluid import FluidSolution, solve_fluid

ONE_REQUEST_MODES: tuple[RequestMode, ...] = ("threshold", "directed")
"""Request modes in which a robot waits for its answer before it sends again."""


def starvation_bound(
    robots: Sequence[RobotSpec],
    profile: LatencyProfile,
    max_batch_size: int,
    *,
    request_mode: RequestMode = "every-tick",
    latency_jitter: float = 0.0,
    num_gpus: int = 1,
    threshold_margin_s: float = 0.0,
) -> float:
    """Least achievable fleet starvation (fraction of ticks): ``1 - sum a_i / sum f_i``.

    ``latency_jitter`` is the forward pass's relative jitter (uniform in ``[1 - j, 1 + j]``
    times the profile), drawn after a batch is formed. With ``num_gpus`` K the
    fleet is served by K such GPUs, however its robots are placed on them.
    ``threshold_margin_s``: how far beyond its round trip a threshold client asks (any
    margin at least this large keeps the bound valid; 0 is valid for every client).
    """
    one_request = request_mode in ONE_REQUEST_MODES
    return _least_starvation(
        robots,
        profile,
        max_batch_size,
        one_request_jitter=latency_jitter if one_request else None,
        streaming_jitter=None if one_request else latency_jitter,
        num_gpus=num_gpus,
        threshold_margin_s=threshold_margin_s if request_mode == "threshold" else None,
    )


def fleet_bound(fleet: FleetSpec, num_gpus: int = 1) -> float:
    """:func:`starvation_bound` of a fleet file's robots, profile and request mode, on
    ``num_gpus`` GPUs."""
    return starvation_bound(
        fleet.robot_specs(),
        fleet.profile(),
        fleet.max_batch_size,
        request_mode=fleet.request_mode,
        latency_jitter=fleet.latency_jitter,
        num_gpus=num_gpus,
        threshold_margin_s=fleet.threshold_margin_s,
    )


def fastest_pass_s(latency_s: np.ndarray, latency_jitter: float) -> float:
    """The shortest forward pass any batch can take: the least of the profile's latencies
    (``latency_s``, per batch size) at the low end of its relative jitter."""
    return float(np.min(latency_s)) * (1.0 - latency_jitter)


def expected_tick_starvation(fleet: FleetSpec) -> float:
    """The fluid's least starvation when each chunk pays the ticks a window of its
    latency holds on average over the tick phase (``f l``), not the fewest.

    Not a bound: a scheduler that starts batches just as its robots' observations
    arrive pays fewer. It is close to what a fleet pays whose batches start at
    random phases of its robots' ticks (docs/benchmarks.md).
    """
    return _least_starvation(
        fleet.robot_specs(), fleet.profile(), fleet.max_batch_size, expected_ticks=True
    )


def _least_starvation(
    robots: Sequence[RobotSpec],
    profile: LatencyProfile,
    max_batch_size: int,
    *,
    expected_ticks: bool = False,
    one_request_jitter: float | None = None,
    streaming_jitter: float | None = None,
    num_gpus: int = 1,
    threshold_margin_s: float | None = None,
) -> float:
    """The fluid's least starvation; with ``one_request_jitter`` (the forward pass's
    relative jitter) the one-request-mode constraints are added, with
    ``streaming_jitter`` (the same, for streaming robots) the ticks their chunks' windows
    hold on average, and with ``threshold_margin_s`` (threshold clients) what each client
    holds when it asks."""
    if not robots:
        return 0.0
    classes = robot_classes(robots)
    latency = profile.table(max_batch_size)[1:]
    windows = []
    if one_request_jitter is not None:
        windows.append(classes.one_request_window_ticks(latency, one_request_jitter))
    if streaming_jitter is not None:
        windows.append(classes.streaming_window_ticks(latency, streaming_jitter))
    asks_ahead = (
        None
        if threshold_margin_s is None or one_request_jitter is None
        else classes.threshold_asks_ahead(latency, one_request_jitter, threshold_margin_s)
    )
    solution = classes.solve(
        latency,
        expected_ticks=expected_ticks,
        window_ticks=windows,
        min_execution_horizon=(
            None if one_request_jitter is None else classes.min_execution_horizon
        ),
        num_gpus=num_gpus,
        asks_ahead=asks_ahead,
    )
    return classes.starvation(solution)


@dataclass(frozen=True)
class RobotClasses:
    """Robots grouped by rate, horizons, links and weight (interchangeable robots)."""

    control_hz: np.ndarray
    max_execution_horizon: np.ndarray
    min_execution_horizon: np.ndarray
    uplink: tuple[DelaySpec, ...]
    downlink: tuple[DelaySpec, ...]
    weight: np.ndarray
    count: np.ndarray

    @property
    def delay_s(self) -> np.ndarray:
        """The smallest uplink plus downlink of each class."""
        pairs = zip(self.uplink, self.downlink, strict=True)
        return np.array([u.min_s + d.min_s for u, d in pairs])

    def starvation(self, solution: FluidSolution) -> float:
        """The fleet's starvation under ``solution``: ``1 - sum a_i / sum f_i``."""
        executed = float(self.count @ solution.actions_per_s)
        return max(0.0, 1.0 - executed / float(self.count @ self.control_hz))

    def one_request_window_ticks(self, latency_s: np.ndarray, latency_jitter: float) -> np.ndarray:
        """Ticks a chunk's round trip holds on average (classes x batch sizes), for a robot
        that sends when it decides and then waits for the chunk.

        The uplink delay ``u`` is drawn after the robot sent, so it averages over its
        distribution whichever requests the scheduler batches together; the forward pass
        ``L_b`` and the downlink ``d`` are drawn after the batch size is chosen. A window
        of ``u + L_b + d`` seconds from a tick holds at least ``floor(f u) + floor(f (L_b
        + d))`` ticks; each term is averaged over its uniform delays exactly.
        """
        uplink_ticks = [
            expected_floor(f, up.min_s, up.median_s + up.jitter_s, 0.0, 0.0)
            for f, up in zip(self.control_hz, self.uplink, strict=True)
        ]
        after_batch = self._pass_and_downlink_ticks(latency_s, latency_jitter, after_s=0.0)
        return np.array(uplink_ticks)[:, None] + after_batch

    def streaming_window_ticks(self, latency_s: np.ndarray, latency_jitter: float) -> np.ndarray:
        """Ticks a chunk's round trip holds on average (classes x batch sizes), for a
        robot that streams its observations: the scheduler may serve the one that came
        fastest (the least uplink ``u``), but the forward pass ``L_b`` and the downlink
        ``d`` are drawn after the batch is formed, so a window holds at least ``floor(f (u
        + L_b + d))`` ticks, averaged over their uniform delays exactly."""
        uplink_s = np.array([up.min_s for up in self.uplink])
        return self._pass_and_downlink_ticks(latency_s, latency_jitter, after_s=uplink_s)

    def _pass_and_downlink_ticks(
        self, latency_s: np.ndarray, latency_jitter: float, *, after_s: float | np.ndarray
    ) -> np.ndarray:
        """``E[floor(f (a + L_b + d))]`` (classes x batch sizes) for a window that starts
        ``after_s`` (``a``, per class or one for all) before the forward pass ``L_b`` (its
        relative jitter uniform) and the downlink ``d``, both uniform."""
        after = np.broadcast_to(np.asarray(after_s, dtype=np.float64), self.control_hz.shape)
        rows = [
            [
                expected_floor(
                    f,
                    a + latency * (1.0 - latency_jitter),
                    a + latency * (1.0 + latency_jitter),
                    down.min_s,
                    down.median_s + down.jitter_s,
                )
                for latency in latency_s
            ]
            for f, a, down in zip(self.control_hz, after, self.downlink, strict=True)
        ]
        return np.array(rows, dtype=np.float64).reshape(len(self.downlink), len(latency_s))

    def threshold_asks_ahead(
        self, latency_s: np.ndarray, latency_jitter: float, margin_s: float
    ) -> np.ndarray:
        """Actions a threshold client holds, on average over its chunks, when it asks: at
        least ``h = min(floor(f (t + margin_s)), E - k, (E - 1) / 2)``, where ``t`` is the
        shortest round trip (both links and the fastest forward pass at their least).

        The client measures its round trips and asks once the actions it holds last no
        longer than their moving average plus its margin, and not before it is ``k``
        (``min_execution_horizon``) actions into its chunk. Every round trip is at least
        ``t``, so it asks holding more than ``f (t + margin_s) - 1`` actions, or ``E - k``
        where it waits for the ``k``-th action, or, where its chunk landed too late for
        either, one tick after the landing: then it holds at least ``E - 1 - x`` for the
        ``x`` it held when it asked for that chunk, and the two chunks overlap ``E - 1``
        between them. So the average is at least ``h`` (docs/scheduling.md, "What a
        threshold client holds").
        """
        fastest_s = fastest_pass_s(latency_s, latency_jitter)
        ahead = np.floor((self.delay_s + fastest_s + margin_s) * self.control_hz)
        paired = (self.max_execution_horizon - 1.0) / 2.0
        spacing = self.max_execution_horizon - self.min_execution_horizon
        return np.maximum(np.minimum(np.minimum(ahead, spacing), paired), 0.0)

    def solve(self, latency_s: np.ndarray, **options: object) -> FluidSolution:
        """:func:`solve_fluid` over the classes (``options`` as there)."""
        return solve_fluid(
            self.control_hz,
            self.max_execution_horizon,
            self.delay_s,
            latency_s,
            count=self.count,
            **options,  # type: ignore[arg-type]
        )


def robot_classes(robots: Sequence[RobotSpec]) -> RobotClasses:
    """Group interchangeable robots, in order of first appearance."""
    counts: dict[tuple[float, int, int, DelaySpec, DelaySpec, float], int] = {}
    for r in robots:
        key = (
            r.control_hz,
            r.max_execution_horizon,
            r.min_execution_horizon,
            r.uplink,
            r.downlink,
            r.weight,
        )
        counts[key] = counts.get(key, 0) + 1
    keys = list(counts)
    return RobotClasses(
        control_hz=np.array([k[0] for k in keys], dtype=np.float64),
        max_execution_horizon=np.array([k[1] for k in keys], dtype=np.float64),
        min_execution_horizon=np.array([k[2] for k in keys], dtype=np.float64),
        uplink=tuple(k[3] for k in keys),
        downlink=tuple(k[4] for k in keys),
        weight=np.array([k[5] for k in keys], dtype=np.float64),
        count=np.array(list(counts.values()), dtype=np.float64),
    )


_NARROW_TICKS = 1e-3
"""A delay spread narrower than this many ticks is taken at its smallest value (a
lower bound, and no cancellation in :func:`expected_floor`'s differences)."""


def expected_floor(scale: float, lo1: float, hi1: float, lo2: float, hi2: float) -> float:
    """``E[floor(scale (X1 + X2))]`` for independent ``X1 ~ U[lo1, hi1]``, ``X2 ~ U[lo2, hi2]``.

    Exact, through the repeated integrals of ``floor``: ``F(y) = int_0^y floor`` and
    ``H(y) = int_0^y F``. A spread under a thousandth of a tick is taken at its low end,
    which can only lower the result.
    """
    w1 = scale * (hi1 - lo1)
    w2 = scale * (hi2 - lo2)
    y1, y2 = scale * lo1, scale * lo2
    if w1 < _NARROW_TICKS:
        w1 = 0.0
    if w2 < _NARROW_TICKS:
        w2 = 0.0
    if w1 == 0.0 and w2 == 0.0:
        return float(math.floor(y1 + y2 + 1e-9))
    if w1 == 0.0 or w2 == 0.0:
        y, w = y1 + y2, w1 + w2
        return (_floor_integral(y + w) - _floor_integral(y)) / w
    corners = (
        _floor_integral2(y1 + w1 + y2 + w2)
        - _floor_integral2(y1 + y2 + w2)
        - _floor_integral2(y1 + w1 + y2)
        + _floor_integral2(y1 + y2)
    )
    return corners / (w1 * w2)


def _floor_integral(y: float) -> float:
    """``int_0^y floor(t) dt`` for ``y >= 0``."""
    n = math.floor(y)
    return n * (n - 1) / 2 + n * (y - n)


def _floor_integral2(y: float) -> float:
    """``int_0^y int_0^s floor(t) dt ds`` for ``y >= 0``."""
    n = math.floor(y)
    theta = y - n
    return (n - 1) * n * (2 * n - 1) / 12 + n * (n - 1) / 2 * theta + n * theta**2 / 2
