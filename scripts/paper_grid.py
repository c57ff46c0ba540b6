"""Write the Armory paper's fleet grid, the files under configs/fleets/paper/.

Robots run at 20 Hz with an action horizon of 10 and a max batch of 5. A normal
robot executes at most 10 actions per chunk; a fast one at most 6. Fleets of 2,
4, 6, 8 and 10 robots come as homogeneous (all normal), one-fast (one fast robot)
and half-fast (half of them fast), with the fast robots weighted 1, 3 or 5, under
each of the two pi0.5 profiles.

    python scripts/paper_grid.py [DIRECTORY]   # default: configs/fleets/paper

tests/test_fleet_spec.py checks that the shipped files are exactly this grid.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from armory.fleet_spec import DelaySpec, FleetSpec, RobotGroup, fleet_to_dict

FLEET_SIZES = (2, 4, 6, 8, 10)
KINDS = ("homogeneous", "one-fast", "half-fast")
FAST_WEIGHTS = (1, 3, 5)
PROFILES = ("l40s-pi05", "l40s-pi05-paper")
LINK = DelaySpec(median_s=0.005, jitter_s=0.002)


def _group(name: str, count: int, horizon: int, weight: float) -> RobotGroup:
    return RobotGroup(
        name=name,
        count=count,
        control_hz=20.0,
        min_execution_horizon=1,
        max_execution_horizon=horizon,
        weight=weight,
        uplink=LINK,
        downlink=LINK,
    )


def paper_fleet(kind: str, num_robots: int, fast_weight: float, profile: str) -> FleetSpec:
    """One cell of the grid."""
    num_fast = {"homogeneous": 0, "one-fast": 1, "half-fast": num_robots // 2}[kind]
    groups = []
    if num_fast:
        groups.append(_group("fast", num_fast, 6, float(fast_weight)))
    groups.append(_group("normal", num_robots - num_fast, 10, 1.0))
    weight_tag = "" if kind == "homogeneous" else f"-w{fast_weight:g}"
    return FleetSpec(
        name=f"{profile}-{kind}-{num_robots}{weight_tag}",
        robots=tuple(groups),
        action_horizon=10,
        max_batch_size=5,
        latency_profile=profile,
        request_mode="every-tick",
    )


def paper_grid() -> list[FleetSpec]:
    """Every cell: homogeneous fleets once, the others once per fast weight."""
    fleets = []
    for profile in PROFILES:
        for kind in KINDS:
            weights = (1,) if kind == "homogeneous" else FAST_WEIGHTS
            for weight in weights:
                for n in FLEET_SIZES:
                    fleets.append(paper_fleet(kind, n, weight, profile))
    return fleets


def write_paper_grid(directory: Path) -> list[Path]:
    """Write every cell as ``<name>.yaml`` under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for fleet in paper_grid():
        path = directory / f"{fleet.name}.yaml"
        path.write_text(yaml.safe_dump(fleet_to_dict(fleet), sort_keys=False))
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    default = Path(__file__).resolve().parents[1] / "configs" / "fleets" / "paper"
    parser.add_argument("directory", nargs="?", type=Path, default=default)
    args = parser.parse_args()
    paths = write_paper_grid(args.directory)
    print(f"wrote {len(paths)} fleet files to {args.directory}")


if __name__ == "__main__":
    main()
