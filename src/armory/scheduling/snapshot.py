"""What a scheduler sees and what it returns: plain frozen data, no I/O, no clock."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Snapshot:
    """The fleet as the server believes it is at ``now_s``; one array entry per robot.

    All times are seconds on the server's own clock. Arrays are aligned and never
    mutated by a scheduler.
    """

    now_s: float
    robot_id: np.ndarray
    """int64: the engine's id of each robot."""
    contact_order: np.ndarray
    """int64: rank of each robot's first contact (0 = first robot the server met)."""
    deadline_s: np.ndarray
    """float64: when the robot's queue runs dry if nothing new lands (may be in the past)."""
    obs_time_s: np.ndarray
    """float64: when the observation the server holds for the robot was taken (estimate)."""
    eligible: np.ndarray
    """bool: the robot may go into the next batch (it has an observation that passes the
    minimum execution horizon)."""
    control_hz: np.ndarray
    """float64: actions the robot executes per second."""
    max_execution_horizon: np.ndarray
    """int64: actions of a chunk the robot will execute at most."""
    weight: np.ndarray
    """float64: importance of the robot's motion."""
    downlink_s: np.ndarray
    """float64: expected seconds from the end of the forward pass to the chunk landing."""
    latency_table_s: np.ndarray
    """float64: forward-pass seconds for batch sizes 0..max_batch_size (entry 0 is 0)."""
    max_batch_size: int
    directed: np.ndarray | None = None
    """bool: the robot sends its observations when the server says (directed mode); None:
    no robot does."""
    asks_ahead: np.ndarray | None = None
    """int64: for a robot that asks once per chunk at a moment its own client picks (a
    threshold client), the actions it still held when it sent its latest observation: its
    client asks that early, and each chunk overlaps that much of its queue. 0 for robots
    whose moment the server picks (streaming, directed); None: 0 for every robot."""
    streams: np.ndarray | None = None
    """bool: the robot keeps sending observations while its chunk is on its way, at least
    once its queue runs short (every-tick clients; LeRobot's, which send on every tick
    while they hold at most a fraction of a chunk), so a fresh one will be there when it
    is served; None: not declared (a scheduler may judge by the observation's age)."""
    plays_out: np.ndarray | None = None
    """bool: the robot asks once per chunk and only once it has played the chunk out (its
    minimum execution horizon is its maximum, or it is a plain openpi or GR00T client,
    whose runtime asks so): its observations are taken with its queue dry, and a reply
    that waits does not make its client ask earlier; None: no robot does."""

    @property
    def num_robots(self) -> int:
        return int(self.robot_id.shape[0])

    def latency_s(self, batch_size: int) -> float:
        return float(self.latency_table_s[batch_size])

    def chunk_seconds(self) -> np.ndarray:
        """Seconds of motion one chunk holds for each robot: max horizon / rate."""
        return self.max_execution_horizon / self.control_hz

    def relative_weight(self) -> np.ndarray:
        """Each robot's weight relative to the heaviest robot's: weights are relative, and
        sums over them that are rounded (to tell ties from float noise) or handed to a
        solver read alike at any scale of the weights."""
        return self.weight / self.weight.max()

    def dry_after_landing_s(self, land_s: np.ndarray | float) -> np.ndarray:
        """When each robot's queue would run dry if a chunk from its held observation
        landed at ``land_s``.

        Between the observation and the landing the robot keeps executing its old
        queue until it runs dry; those actions are the new chunk's first ones, so
        the chunk adds ``max horizon`` minus what was executed meanwhile.
        """
        executed_s = np.maximum(0.0, np.minimum(land_s, self.deadline_s) - self.obs_time_s)
        return land_s + self.chunk_seconds() - executed_s


@dataclass(frozen=True)
class Batch:
    """A scheduler's decision: the robots whose next chunks the executor computes now."""

    robot_ids: tuple[int, ...]
    """Engine ids, at most ``max_batch_size``, each eligible, none twice. Empty: run nothing."""
    wait_until_s: float | None = None
    """With an empty batch: ask again at this time even if nothing else happens."""
    rule: str = ""
    """Name of the rule that made the decision (``armory simulate --explain`` counts them);
    Armory's schedulers name every decision, a scheduler that names none is counted
    under its own name."""


class InvalidBatchError(RuntimeError):
    """A scheduler returned a batch that breaks the batch invariants."""


def check_batch(snapshot: Snapshot, batch: Batch) -> None:
    """Assert the batch invariants: not over the max, no robot twice, only eligible robots."""
    ids = batch.robot_ids
    if len(ids) > snapshot.max_batch_size:
        raise InvalidBatchError(
            f"batch of {len(ids)} exceeds max_batch_size {snapshot.max_batch_size}"
        )
    if len(set(ids)) != len(ids):
        raise InvalidBatchError(f"batch holds a robot twice: {ids}")
    eligible = set(snapshot.robot_id[snapshot.eligible].tolist())
    bad = [i for i in ids if i not in eligible]
    if bad:
        raise InvalidBatchError(f"batch holds ineligible robots {bad}")
