"""``armory eval ENV [POLICY]``: task success of a served policy on simulated robots.

Either ``--server HOST:PORT`` names a running ``armory serve`` (any policy), or a
server is started here, on 127.0.0.1 and a free port, with the given policy
(default ``policy:expert``) and ``--serve.*`` options (scheduler, max batch).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro
from tqdm import tqdm

from armory.core.door_names import DoorName
from armory.engine.config import ServerConfig
from armory.eval.aloha import AlohaConfig
from armory.eval.lerobot_client import lerobot_layout
from armory.eval.libero import LiberoConfig
from armory.eval.plan import EvalPlan
from armory.eval.plots import plot_queues, plot_success_by_axis
from armory.eval.pusht import PushTConfig
from armory.eval.recording import RecordConfig, write_dataset
from armory.eval.results import EpisodeResult, format_table, progress_fields
from armory.eval.runner import EvalError, prepare, run_eval, write_results
from armory.eval.so101 import So101PickConfig
from armory.eval.variation import VariationConfig
from armory.policies.config import PolicyConfig, for_server, make_policy
from armory.policies.expert import ExpertPolicyConfig
from armory.server_stats import batches_since_now
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.lerobot_grpc import LeRobotDoorConfig

EnvChoice = (
    Annotated[So101PickConfig, tyro.conf.subcommand("so101-pick")]
    | Annotated[PushTConfig, tyro.conf.subcommand("pusht")]
    | Annotated[AlohaConfig, tyro.conf.subcommand("aloha")]
    | Annotated[LiberoConfig, tyro.conf.subcommand("libero")]
)

API_KEY_ENV = "ARMORY_API_KEY"


@tyro.conf.configure(tyro.conf.CascadeSubcommandArgs)
@dataclass(frozen=True)
class Eval:
    """Evaluate a served policy on simulated robots: success rate (95% Wilson interval),
    starvation, chunk latency; results.json and a table."""

    env: EnvChoice = field(default_factory=So101PickConfig)
    policy: PolicyConfig = field(default_factory=ExpertPolicyConfig)
    """The policy of the in-process server (ignored with --server)."""
    robots: int = 1
    """Simulated robots at once, each an environment in its own process."""
    episodes: int = 10
    """Episodes in all, spread over the robots."""
    episode_time_s: float = 30.0
    """Simulated seconds before an unfinished episode counts as a failure."""
    seed: int = 0
    """Seeds each episode's scene (and the in-process scheduler)."""
    out: Path = Path("eval-results")
    """Directory for results.json and the plots."""
    time_scale: float = 1.0
    """Robots tick at this times their rate and the in-process policy's emulated latency
    is divided by it (0.25: a quarter speed with the same queue dynamics)."""
    action_delay_ticks: int = 0
    """Added actuator delay: each action reaches the environment this many ticks after the
    robot plays it (the single-robot delay curve)."""
    server: str | None = None
    """HOST:PORT of a running armory serve; None starts one here for the run."""
    serve: ServerConfig = field(default_factory=ServerConfig)
    """Options of the in-process server (scheduler, max batch size, ...)."""
    request_mode: Literal["directed", "threshold", "every-tick", "chunk-fraction"] = "directed"
    """How robots ask for chunks: directed, threshold, every-tick or chunk-fraction (every
    tick while half a chunk or less is queued, as LeRobot's async client does)."""
    merge_rule: str = "replace"
    """How a landing chunk joins a robot's queue: replace, weighted_average, latest_only,
    average, conservative, temporal_ensemble or rtc."""
    execution_horizon: int | None = None
    """Most actions a robot plays of one chunk; None: the policy's whole chunk."""
    door: DoorName = "openpi"
    """The front door robots use: openpi (WebSocket, Armory's queue state), groot (ZeroMQ,
    plain clients) or lerobot (gRPC, as LeRobot's RobotClient); the in-process server
    opens it."""
    door_port: int | None = None
    """With --server and --door groot or lerobot: that door's port on the server's host."""
    mapping: dict[str, str] = field(default_factory=dict)
    """Rename observation entries to the policy's input names: ENV_KEY POLICY_KEY ..."""
    variation: VariationConfig = field(default_factory=VariationConfig)
    scene: dict[str, float] = field(default_factory=dict)
    """Axis values set by hand for every episode: AXIS VALUE ... (checked against the
    axis's limits before anything starts)."""
    record: RecordConfig = field(default_factory=RecordConfig)
    """Record every episode as a LeRobot v3 dataset (--record.dir DIR)."""
    api_key: str | None = None
    """Send 'Authorization: Api-Key <key>' (default: $ARMORY_API_KEY if set)."""
    connect_timeout_s: float = 10.0
    """Seconds to reach the server before giving up."""
    progress: bool = True
    """Show a progress bar."""

    def run(self) -> int:
        """Run the evaluation; raises EvalError (one line) for what cannot be done."""
        try:
            return self._run()
        except (ValueError, OSError) as exc:
            raise EvalError(" ".join(str(exc).split())) from exc

    def _run(self) -> int:
        self.env.prepare_process()  # before a policy or a check imports the simulator
        api_key = self.api_key or os.environ.get(API_KEY_ENV) or None
        if self.server is not None:
            if self.door != "openpi" and self.door_port is None:
                raise ValueError(
                    f"--door {self.door} with --server needs --door-port (that door's port)"
                )
            info = {"in_process_server": False}
            door_port = self.door_port if self.door != "openpi" else None
            uri = _uri(self.server)
            num_batches = batches_since_now(uri, api_key) if self.progress else None
            return self._evaluate(uri, api_key, info, None, door_port, num_batches)
        from armory.serve import ArmoryServer, ServerThread

        policy_config = for_server(self._scaled_policy(), self.serve.max_batch_size)
        policy = make_policy(policy_config)
        ticket = _ticket(policy_config, policy)
        doors = []
        if self.door == "groot":
            doors.append(GrootDoorConfig(port=0).door("127.0.0.1", api_key=api_key))
        if self.door == "lerobot":
            doors.append(_lerobot_door(policy, self.env.name).door("127.0.0.1", api_key=api_key))
        server = ArmoryServer(
            policy, self.serve, host="127.0.0.1", port=0, api_key=api_key, doors=doors
        )
        info = {
            "in_process_server": True,
            "policy_config": _plain(dataclasses.asdict(policy_config)),
            "max_batch_size": self.serve.max_batch_size,
        }
        with ServerThread(server) as thread:
            door_port = server.doors[0].port if doors else None

            def num_batches() -> int:
                return thread.stats().num_batches

            return self._evaluate(thread.uri, api_key, info, ticket, door_port, num_batches)

    def _scaled_policy(self) -> Any:
        """The policy config with its emulated latency divided by the time scale."""
        if isinstance(self.policy, ExpertPolicyConfig):
            scale = self.policy.latency_scale / self.time_scale
            return dataclasses.replace(self.policy, latency_scale=scale)
        return self.policy

    def _evaluate(
        self,
        uri: str,
        api_key: str | None,
        info: dict[str, Any],
        ticket: dict[str, Any] | None,
        door_port: int | None,
        num_batches: Callable[[], int] | None,
    ) -> int:
        """``num_batches``: the server's forward passes since the run started, for the
        progress bar (None: a server without a readable ``/stats``)."""
        plan = EvalPlan(
            env=self.env,
            uri=uri,
            num_robots=self.robots,
            num_episodes=self.episodes,
            episode_time_s=self.episode_time_s,
            seed=self.seed,
            time_scale=self.time_scale,
            request_mode=self.request_mode,
            merge_rule=self.merge_rule,
            execution_horizon=self.execution_horizon,
            door=self.door,
            door_port=door_port,
            mapping=self.mapping,
            variation=self.variation,
            scene=self.scene,
            ticket=ticket,
            action_delay_ticks=self.action_delay_ticks,
            record=self.record,
            api_key=api_key,
            connect_timeout_s=self.connect_timeout_s,
            run_info=info,
        )
        prepared = prepare(plan)
        with tqdm(
            total=self.episodes,
            desc="eval",
            unit="episode",
            file=sys.stderr,
            disable=not self.progress,
        ) as bar:
            done: list[EpisodeResult] = []

            def show(episode: EpisodeResult) -> None:
                done.append(episode)
                fields = progress_fields(done)
                if num_batches is not None:
                    fields["batches"] = str(num_batches())
                bar.set_postfix(fields, refresh=False)
                bar.update()

            run = run_eval(prepared, on_episode=show)
        path = write_results(run, self.out)
        print(format_table(run.summary, run.info))
        print(f"\nwrote {path}")
        plots = [
            plot_success_by_axis(run.episodes, self.out / "success_by_axis.png"),
            plot_queues(run.episodes, self.out / "queues.png", run.info["control_hz"]),
        ]
        for plot in plots:
            if plot is not None:
                print(f"wrote {plot}")
        if self.record.enabled:
            try:
                root = write_dataset(self.record, self.record.staging, run.info["control_hz"])
            except RuntimeError as exc:
                raise EvalError(str(exc)) from exc
            print(f"wrote LeRobot dataset {root}")
        return 0


def _uri(server: str) -> str:
    """ws://HOST:PORT of ``--server`` (HOST:PORT or a ws:// URI)."""
    if server.startswith(("ws://", "wss://")):
        return server
    host, sep, port = server.rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) <= 65535):
        raise ValueError(f"--server must look like HOST:PORT, got {server!r}")
    return f"ws://{host}:{port}"


def _lerobot_door(policy: Any, env: str) -> LeRobotDoorConfig:
    """The in-process server's LeRobot door for eval robots: it reads their observations
    back by their layout (:func:`lerobot_layout`). Pickle is on (the robots are this
    run's own processes, on 127.0.0.1), and so is a mismatched policy: a simulated
    robot's state vector is not its action space, which the door's joint check assumes."""
    inputs = {key: spec.to_wire() for key, spec in policy.metadata.inputs.items()}
    return LeRobotDoorConfig(
        port=0,
        allow_unsafe_pickle_on_untrusted_networks=True,
        allow_mismatched_policy=True,
        mapping=lerobot_layout(inputs, env=env).door_mapping(),
    )


def _ticket(config: Any, policy: Any) -> dict[str, Any] | None:
    """The identity of the policy's fixed noise (schema, shape, SHA-256, seed or path)."""
    noise = getattr(policy, "noise", None)
    if noise is None:
        return None
    noise_config = getattr(config, "noise", None)
    return {
        "shape": list(noise.array.shape),
        "sha256": noise.sha256,
        "seed": getattr(noise_config, "seed", None),
        "path": None if getattr(noise_config, "ticket", None) is None else str(noise_config.ticket),
    }


def _plain(value: Any) -> Any:
    """``value`` with paths as strings (for JSON)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, Path) else value


__all__ = ["Eval", "EvalError"]
