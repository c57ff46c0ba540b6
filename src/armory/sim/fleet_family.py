"""Random fleets from a seed: the family that schedulers are tuned and judged on.

A fleet of the ``mixed`` family has one to four robot types. Each type has a
control rate (5-60 Hz), a chunk of 0.25-1.5 s of motion (its max execution horizon,
within the fleet's action horizon of 10-50, and at least 1.5 round trips at batch
one), a min execution horizon, links of 1-40 ms (a far type at 60-150 ms in some
fleets) with jitter up to the median, and in some fleets a weight of 2-5. The
latency profile is linear, concave (measured points of pi0.5 and GR00T, scaled) or
near flat; the max batch is 4-32; the request
mode is every-tick, threshold or directed. Robot counts are drawn so that the
fleet asks for 0.3x to 1.6x the GPU's capacity (``load``: chunks per second asked,
``sum f_i / E_i``, over the most the GPU computes, ``max_b b / latency(b)``), with
2 to 256 robots.

Fleets are numbered by seed; the split between the seeds a scheduler is tuned on
and those it is judged on is fixed here, so that nobody reports on a seed they
tuned with: :data:`TRAIN_SEEDS` and :data:`TEST_SEEDS`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from armory.core.latency_profile import PRESET_POINTS, LatencyProfile
from armory.fleet_spec import DelaySpec, FleetSpec, RequestMode, RobotGroup, fleet_to_dict

FAMILIES: tuple[str, ...] = ("mixed",)
"""Names of the fleet families :func:`generate_family` knows."""

FAMILY_REQUEST_MODES: tuple[RequestMode, ...] = ("every-tick", "threshold", "directed")
"""The request modes a family fleet is drawn with (a fleet of LeRobot-like clients is one of
them switched to ``chunk-fraction``: ``benchmarks/family.py --request-mode``)."""

TRAIN_SEEDS = range(0, 1000)
"""Seeds a scheduler may be tuned on."""
TEST_SEEDS = range(1000, 100_000)
"""Seeds no change may be tuned on: the family's results are reported on these."""

MAX_ROBOTS = 256
MIN_ROBOTS = 2

_CONCAVE_POINTS: dict[str, dict[int, float]] = {
    "pi05": PRESET_POINTS["l40s-pi05"],
    "groot": {1: 0.045, 2: 0.055, 4: 0.075, 8: 0.120, 16: 0.210},
}
_RATES_HZ = (5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0)


@dataclass(frozen=True)
class FamilyFleet:
    """One generated fleet and the numbers it was drawn to."""

    fleet: FleetSpec
    seed: int
    load: float
    """Chunks per second the fleet asks over the most the GPU computes."""


def generate_family(family: str, count: int, seed: int) -> list[FamilyFleet]:
    """``count`` fleets of ``family``, the i-th drawn from seed ``seed + i``."""
    if family not in FAMILIES:
        raise ValueError(f"unknown fleet family {family!r}; valid names: {', '.join(FAMILIES)}")
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return [generate_fleet(family, seed + i) for i in range(count)]


def generate_fleet(family: str, seed: int) -> FamilyFleet:
    """The fleet of ``family`` numbered ``seed`` (the same seed, the same fleet)."""
    rng = np.random.Generator(np.random.PCG64([seed, 0x5EED]))
    action_horizon = int(rng.integers(10, 51))
    max_batch = int(rng.choice([4, 5, 6, 8, 10, 12, 16, 24, 32]))
    points = _latency_points(rng)
    latency = LatencyProfile(points).table(max_batch)[1:]
    capacity = _chunks_per_s(latency)
    weighted = rng.random() < 0.3
    num_types = int(rng.integers(1, 5))
    far_type = int(rng.integers(num_types)) if rng.random() < 0.3 else -1
    types = []
    for t in range(num_types):
        rate = float(rng.choice(_RATES_HZ))
        if t == far_type:
            link_s = float(rng.uniform(0.060, 0.150))
        else:
            link_s = float(np.exp(rng.uniform(math.log(0.001), math.log(0.040))))
        jitter_s = link_s * float(rng.uniform(0.0, 1.0))
        # A chunk outlasts a round trip at batch one with room to spare: a robot that
        # asks once and waits for the answer could not be kept moving otherwise.
        round_trip_s = 2.0 * (link_s + jitter_s) + float(latency[0])
        chunk_s = max(float(rng.uniform(0.25, 1.5)), 1.5 * round_trip_s)
        horizon = int(np.clip(round(chunk_s * rate), 2, action_horizon))
        min_horizon = int(np.clip(round(horizon * rng.uniform(0.1, 0.6)), 1, horizon))
        link = DelaySpec(median_s=round(link_s, 4), jitter_s=round(min(jitter_s, link_s), 4))
        weight = float(rng.integers(2, 6)) if weighted and rng.random() < 0.5 else 1.0
        types.append((rate, horizon, min_horizon, link, weight))
    load = float(rng.uniform(0.3, 1.6))
    shares = rng.dirichlet(np.ones(num_types))
    per_robot = np.array([rate / horizon for rate, horizon, *_ in types])
    robots_for_load = load * capacity / float(shares @ per_robot)
    counts = np.maximum(1, np.round(shares * robots_for_load)).astype(int)
    while counts.sum() > MAX_ROBOTS:
        counts = np.maximum(1, counts * MAX_ROBOTS // counts.sum())
    if counts.sum() < MIN_ROBOTS:
        counts[0] += MIN_ROBOTS - counts.sum()
    groups = tuple(
        RobotGroup(
            name=f"t{t}-{int(rate)}hz",
            count=int(counts[t]),
            control_hz=rate,
            min_execution_horizon=min_horizon,
            max_execution_horizon=horizon,
            weight=weight,
            uplink=link,
            downlink=link,
        )
        for t, (rate, horizon, min_horizon, link, weight) in enumerate(types)
    )
    fleet = FleetSpec(
        name=f"{family}-{seed:05d}",
        robots=groups,
        action_horizon=action_horizon,
        max_batch_size=max_batch,
        latency_profile="linear",
        latency_points=points,
        latency_jitter=round(float(rng.uniform(0.0, 0.1)), 3),
        request_mode=FAMILY_REQUEST_MODES[int(rng.integers(len(FAMILY_REQUEST_MODES)))],
    )
    return FamilyFleet(fleet=fleet, seed=seed, load=fleet_load(fleet))


def fleet_load(fleet: FleetSpec) -> float:
    """Chunks per second the fleet asks (``sum f_i / E_i``) over the most the GPU
    computes at any batch size up to the max (``max_b b / latency(b)``)."""
    capacity = _chunks_per_s(fleet.profile().table(fleet.max_batch_size)[1:])
    demand = sum(g.count * g.control_hz / g.max_execution_horizon for g in fleet.robots)
    return demand / capacity


def _chunks_per_s(latency_s: np.ndarray) -> float:
    """The most chunks a second the GPU computes, at the best batch size (``latency_s[j]``
    is the forward pass of a batch of ``j + 1``)."""
    return float(np.max(np.arange(1, latency_s.size + 1) / latency_s))


def _latency_points(rng: np.random.Generator) -> dict[int, float]:
    kind = rng.choice(["linear", "concave", "flat"])
    if kind == "linear":
        intercept_s = float(rng.uniform(0.020, 0.080))
        slope_s = float(rng.uniform(0.002, 0.015))
    elif kind == "flat":
        intercept_s = float(rng.uniform(0.030, 0.100))
        slope_s = float(rng.uniform(0.0002, 0.001))
    else:
        base = _CONCAVE_POINTS[str(rng.choice(sorted(_CONCAVE_POINTS)))]
        scale = float(rng.uniform(0.5, 1.5))
        return {b: round(s * scale, 5) for b, s in base.items()}
    return {1: round(intercept_s + slope_s, 5), 2: round(intercept_s + 2 * slope_s, 5)}


def write_family(
    family: str, count: int, seed: int, out_dir: Path, request_mode: RequestMode | None = None
) -> list[Path]:
    """Write ``count`` fleets of ``family`` from ``seed`` as fleet files into ``out_dir``,
    each in its own request mode or in ``request_mode``; each file's first lines say where
    it came from and its load."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    mode_option = "" if request_mode is None else f" --request-mode {request_mode}"
    for member in generate_family(family, count, seed):
        fleet = member.fleet
        if request_mode is not None:
            fleet = dataclasses.replace(fleet, request_mode=request_mode)
        path = out_dir / f"{fleet.name}.yaml"
        header = (
            f"# Generated: armory fleets generate --family {family} --seed {member.seed} "
            f"--count 1{mode_option}\n# load {member.load:.3f} (chunks asked per second / "
            f"most the GPU computes); {'test' if member.seed in TEST_SEEDS else 'training'} "
            "seed\n"
        )
        path.write_text(header + yaml.safe_dump(fleet_to_dict(fleet), sort_keys=False))
        paths.append(path)
    return paths
