"""Real LeRobot robots against the simulator's model of them: ``chunk-fraction`` mode.

Starts Armory in this process with its LeRobot door and a mock policy whose forward
pass follows a linear profile, then runs ``--robots`` copies of LeRobot 0.6.1's own,
unmodified ``RobotClient`` (``tests/lerobot_client/run_robot_client.py``, in LeRobot's
environment: ``$ARMORY_LEROBOT_PYTHON`` or ``scripts/lerobot-env.sh``), each driving a
mock robot at ``--fps`` with ``--actions-per-chunk`` and LeRobot's default
``chunk_size_threshold`` (0.5), for ``--seconds``. A robot's starvation is the share of
its control ticks, from its first action to the stop, on which it executed none. Then
the simulator runs the same fleet in ``chunk-fraction`` mode (``--seeds`` draws):
robots at ``--fps`` that play ``actions-per-chunk - 1`` actions of each chunk (LeRobot
numbers a chunk from the observation's own timestep and drops that row) and send while
they hold at most half of ``actions-per-chunk`` (LeRobot divides its queue by the
length of the chunks it received), loopback links, the same profile, max batch and
scheduler. Both starvations are printed, per
scheduler, with the simulator's bound.

    python benchmarks/lerobot_fleet.py [--robots 3] [--fps 30] [--actions-per-chunk 10]
        [--seconds 20] [--intercept 0.05] [--slope 0.01] [--max-batch 4]
        [--schedulers just-in-time max-batch] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from armory.core.latency_profile import LinearProfileConfig
from armory.engine.config import ServerConfig
from armory.fleet_spec import DelaySpec, FleetSpec, RobotGroup
from armory.policies.mock import MockPolicy, MockPolicyConfig
from armory.scheduling.registry import make_scheduler
from armory.serve import ArmoryServer, ServerThread
from armory.sim.bound import fleet_bound
from armory.sim.simulator import SimConfig, simulate
from armory.transports.lerobot_grpc import LeRobotDoorConfig

REPO = Path(__file__).resolve().parents[1]
CLIENT = REPO / "tests" / "lerobot_client" / "run_robot_client.py"
LOOPBACK_S = 0.0005
"""One-way delay the simulated robots get: loopback."""
CHUNK_SIZE_THRESHOLD = 0.5
"""LeRobot's default, which the real robots run with."""


def lerobot_python() -> str:
    """LeRobot's interpreter: ``$ARMORY_LEROBOT_PYTHON``, else the one the script builds."""
    found = os.environ.get("ARMORY_LEROBOT_PYTHON")
    if found:
        return found
    script = REPO / "scripts" / "lerobot-env.sh"
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def starvation(summary: dict, fps: float) -> float:
    """Share of control ticks from the first action to the stop with no action."""
    times = summary["action_times_s"]
    if not times:
        return 1.0
    ticks = max((summary["stopped_s"] - times[0]) * fps, 1.0)
    return max(0.0, 1.0 - len(times) / ticks)


def run_real(args: argparse.Namespace, scheduler: str, python: str) -> list[float]:
    """Each real robot's starvation against a fresh server with ``scheduler``."""
    policy = MockPolicy(
        MockPolicyConfig(
            latency_profile="linear",
            linear=LinearProfileConfig(intercept_s=args.intercept, slope_s=args.slope),
            state_dim=7,
            action_dim=7,
            action_horizon=args.actions_per_chunk,
        )
    )
    door = LeRobotDoorConfig(
        port=0,
        allow_unsafe_pickle_on_untrusted_networks=True,
        allowed_networks=("127.0.0.1/32",),
        default_control_hz=args.fps,
    )
    server = ArmoryServer(
        policy,
        ServerConfig(max_batch_size=args.max_batch, scheduler=scheduler),
        port=None,
        doors=[door.door("127.0.0.1", api_key="fleet-key")],
    )
    with ServerThread(server), tempfile.TemporaryDirectory() as folder:
        port = server.doors[0].port  # type: ignore[attr-defined]
        command = [python, str(CLIENT), "--server", f"127.0.0.1:{port}"]
        command += ["--seconds", str(args.seconds), "--fps", str(args.fps)]
        command += ["--actions-per-chunk", str(args.actions_per_chunk)]
        robots = [
            subprocess.Popen(
                [*command, "--seed", str(i), "--calibration-dir", f"{folder}/calibration"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                cwd=folder,
            )
            for i in range(args.robots)
        ]
        outputs = [robot.communicate(timeout=args.seconds + 120)[0] for robot in robots]
    summaries = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    if not all(s["started"] for s in summaries):
        raise SystemExit("a RobotClient did not start (see tests/test_lerobot_robot_client.py)")
    return [starvation(s, args.fps) for s in summaries]


def simulated_fleet(args: argparse.Namespace) -> FleetSpec:
    """The same robots as a chunk-fraction fleet file would hold them."""
    link = DelaySpec(median_s=LOOPBACK_S)
    played = args.actions_per_chunk - 1
    group = RobotGroup(
        name="lerobot",
        count=args.robots,
        control_hz=float(args.fps),
        min_execution_horizon=1,
        max_execution_horizon=played,
        uplink=link,
        downlink=link,
    )
    return FleetSpec(
        name="lerobot-fleet",
        robots=(group,),
        action_horizon=args.actions_per_chunk,
        max_batch_size=args.max_batch,
        latency_profile="linear",
        linear=LinearProfileConfig(intercept_s=args.intercept, slope_s=args.slope),
        request_mode="chunk-fraction",
        # LeRobot's window is half the chunk it receives; the simulated robot plays a row
        # fewer of it.
        chunk_size_threshold=min(1.0, CHUNK_SIZE_THRESHOLD * args.actions_per_chunk / played),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--robots", type=int, default=3)
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--actions-per-chunk", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--intercept", type=float, default=0.05)
    parser.add_argument("--slope", type=float, default=0.01)
    parser.add_argument("--max-batch", type=int, default=4)
    parser.add_argument("--schedulers", nargs="+", default=["just-in-time", "max-batch"])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    if args.actions_per_chunk < 2:
        parser.error("--actions-per-chunk must be >= 2 (a robot plays all rows but the first)")
    # The door warns that each robot asks for LeRobot's act and gets the mock: expected here.
    logging.getLogger("armory").setLevel(logging.ERROR)
    python = lerobot_python()
    fleet = simulated_fleet(args)
    print(
        f"{args.robots} LeRobot RobotClients at {args.fps} Hz, {args.actions_per_chunk}-action "
        f"chunks, chunk_size_threshold 0.5; forward pass {args.intercept:g} s + {args.slope:g} s "
        f"a robot, max batch {args.max_batch}; {args.seconds:g} s; "
        f"bound {100 * fleet_bound(fleet):.1f}%\n"
    )
    print(f"{'scheduler':>14}  {'real starved (per robot)':>34}  {'simulated':>9}")
    for name in args.schedulers:
        real = run_real(args, name, python)
        sims = [
            simulate(fleet, make_scheduler(name), SimConfig(duration_s=args.seconds, seed=seed))
            for seed in range(args.seeds)
        ]
        simulated = float(np.mean([r.system.starvation for r in sims]))
        per_robot = " ".join(f"{100 * x:.1f}" for x in real)
        print(
            f"{name:>14}  {100 * float(np.mean(real)):6.1f}% ({per_robot:>24})  "
            f"{100 * simulated:8.1f}%",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
