"""Chunk merge rules: how a chunk that lands joins the actions a robot still has queued.

The queue model is Armory's (docs/scheduling.md). The robot's **action index** k is
the index of the next action to execute; its queue holds the actions for
``k, k+1, ...`` (an `IndexedActions` whose ``first_index`` is k). A chunk computed
from the observation taken at index s holds the actions for ``s, s+1, ...``.

`merge_chunk` does what every rule shares, then asks the rule for the merged queue:

- **Cut.** Of the chunk's rows it keeps those with index in
  ``[max(s, k), s + max_execution_horizon)``: rows for indices already passed are
  dropped (a chunk that lands *late*, s < k), and rows past the horizon too.
- **Early.** A chunk may start ahead of the robot (k < s, e.g. a client that asks
  for the index it expects to be at when the reply lands): the queued actions
  before s are kept and the rule merges from s on. A start past the end of the
  queue would leave indices no action covers, which the robot could never pass:
  that is a ValueError (the client chooses the index it sends; keep it reachable).
- **End.** The merged queue ends where the chunk's kept rows end: queued actions
  past them are dropped (Armory's rule and LeRobot's alike). Only
  `temporal_ensemble` differs, for an out-of-order chunk, and `rtc`, whose frozen
  actions stay queued even past a shorter chunk (below).
- **Finite.** A chunk holding NaN or inf anywhere is refused whole (outcome
  ``non-finite``) before any rule sees it, even when the bad rows would be cut or
  replaced: such a chunk says the policy is broken, and none of its rows is trusted.
- **Episodes.** `QueueState.new_episode` empties the queue and restarts the index
  at 0; a chunk from an earlier episode is dropped (``stale-episode``); rules with
  memory (`temporal_ensemble`, `rtc`) forget everything of an earlier episode.
- **Out of order.** A chunk whose start is older than the newest merged this
  episode is dropped by every rule but `temporal_ensemble` (outcome ``dropped``).
  LeRobot tracks no chunk order and would blend it in as the *new* side, giving
  the older observation the larger weight and cutting the queue at its earlier end.

Rules, by name (`MERGE_RULES`, `make_merge_rule`):

| name | from max(s, k) on |
| --- | --- |
| `replace` | the chunk's rows (Armory's rule, the default) |
| `latest_only` | the same as `replace`, under LeRobot's name |
| `weighted_average` | where both hold an action: 0.3 old + 0.7 new; else the new row |
| `average` | where both hold an action: 0.5 old + 0.5 new; else the new row |
| `conservative` | where both hold an action: 0.7 old + 0.3 new; else the new row |
| `temporal_ensemble` | per index, every prediction merged for it, weighted ``exp(-m i)`` |
| `rtc` | the frozen prefix sent with the request, then the chunk's rows |

`temporal_ensemble` (ACT): for each index it keeps every chunk's prediction
(oldest first by chunk start; a chunk with the same start as an earlier one
replaces that one's prediction) and queues their average weighted
``exp(-m * i)``, i = 0 for the oldest, m = `decay` (0.01, ACT's
``temporal_ensemble_coeff``, by default). The history holds queued indices only;
each index has at most one prediction per chunk start that covers it, so at most
`max_execution_horizon` (ACT's ``chunk_size`` when every chunk is played whole), as
ACT keeps; `max_predictions` may bound it lower (the oldest are forgotten first).
An out-of-order chunk is not dropped: its predictions take their place by start
(so their weight is that of an older prediction) and the queued indices it covers
are recomputed; the queue neither grows nor shrinks. Rules take their parameters
from `make_merge_rule`'s options (`RuntimeConfig.merge_options`).

**Real-time chunking (`rtc`).** The robot keeps playing while a request is in
flight, so the d actions it executes before the reply lands cannot come from the
new chunk. Before sending, the client calls `ActionQueue.freeze` (`Rtc.freeze` with
the queue's episode; the pure `rtc_request` remembers nothing) with d =
`rtc_delay_ticks(round_trip_s, control_hz)`: the first d
queued actions are frozen (the robot plays them whatever the reply), and the
request carries them and the rest of the queue, so that a policy that supports
inpainting computes a chunk whose first d rows continue them without a seam. When
the chunk lands, the `rtc` rule queues the frozen actions not yet executed and then
the chunk's rows from index s + d on (a policy that ignores the fields still gets
the seam moved d actions later). Wire fields, top-level observation keys beside the
images and state (the server passes undeclared keys to the policy untouched; the
observation's index k is ``__armory__.action_index``):

- `rtc_prefix`: float array (d, action_dim), frozen: the actions for indices
  ``k .. k+d-1``, executed whatever the reply; the chunk's rows ``0 .. d-1``
  should equal them. Left out when d = 0.
- `rtc_remainder`: float array (n, action_dim), the rest of the queue, indices
  ``k+d ..``: the old plan, for soft guidance. Left out when n = 0.
- `rtc_delay`: int >= 0, d: the number of frozen actions, ``len(rtc_prefix)``
  (fewer than asked when the queue holds fewer).

Pure: no I/O, no clock. Rules with memory keep it in their own object, one per robot.
"""

from __future__ import annotations

import abc
import bisect
import dataclasses
import itertools
import math
import numbers
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from armory_client.wire.rtc_keys import RTC_DELAY_KEY, RTC_PREFIX_KEY, RTC_REMAINDER_KEY

__all__ = [
    "MERGE_RULES",
    "Average",
    "Conservative",
    "IndexedActions",
    "Landing",
    "LatestOnly",
    "MergeResult",
    "MergeRule",
    "QueueState",
    "Replace",
    "Rtc",
    "RtcRequest",
    "TemporalEnsemble",
    "WeightedAverage",
    "make_merge_rule",
    "merge_chunk",
    "nonfinite_rows",
    "rtc_delay_ticks",
    "rtc_request",
]


def _check_index(name: str, value: Any) -> int:
    """``value`` as an int >= 0, or a ValueError naming it."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return int(value)


@dataclasses.dataclass(frozen=True, eq=False)
class IndexedActions:
    """Rows of actions with absolute action indices: row j is the action for
    ``first_index + j`` (contiguous by construction)."""

    first_index: int
    """Action index of row 0 (of the next row, when there is none)."""
    actions: np.ndarray
    """(num_rows, action_dim); an empty queue may be (0, 0)."""

    def __post_init__(self) -> None:
        _check_index("IndexedActions.first_index", self.first_index)
        object.__setattr__(self, "first_index", int(self.first_index))
        if not isinstance(self.actions, np.ndarray) or self.actions.ndim != 2:
            shape = getattr(self.actions, "shape", type(self.actions).__name__)
            raise ValueError(f"IndexedActions.actions must be a 2-D array, got {shape}")

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def end_index(self) -> int:
        """One past the last row's index."""
        return self.first_index + len(self.actions)

    @property
    def indices(self) -> np.ndarray:
        """The action index of every row."""
        return np.arange(self.first_index, self.end_index)

    def between(self, lo: int, hi: int) -> IndexedActions:
        """The rows with index in ``[lo, hi)`` (empty, at the nearest index, if none)."""
        a = min(max(lo, self.first_index), self.end_index)
        b = min(max(hi, a), self.end_index)
        return IndexedActions(a, self.actions[a - self.first_index : b - self.first_index])

    @classmethod
    def empty(cls, first_index: int = 0, action_dim: int = 0) -> IndexedActions:
        """No rows, the next one at `first_index`."""
        return cls(first_index, np.zeros((0, action_dim), np.float32))


@dataclasses.dataclass(frozen=True, eq=False)
class QueueState:
    """A robot's queue as merging sees it: what is queued, and the newest chunk merged."""

    queued: IndexedActions = dataclasses.field(default_factory=IndexedActions.empty)
    """The queued actions; ``queued.first_index`` is the robot's action index."""
    newest_start: int | None = None
    """Start index of the newest chunk merged this episode; None before the first."""
    episode_id: int = 0
    """Episode counter; action indices restart at 0 when it changes."""

    @property
    def action_index(self) -> int:
        """Actions executed this episode: the index of the next action to execute."""
        return self.queued.first_index

    def popped(self, num_actions: int = 1) -> QueueState:
        """The state after the robot executed `num_actions` queued actions (ValueError
        if fewer are queued: a starved tick executes nothing and moves no index)."""
        _check_index("num_actions", num_actions)
        if num_actions > len(self.queued):
            raise ValueError(f"cannot pop {num_actions} actions: {len(self.queued)} queued")
        queued = self.queued
        rest = queued.between(queued.first_index + num_actions, queued.end_index)
        return dataclasses.replace(self, queued=rest)

    def new_episode(self) -> QueueState:
        """The state when the robot starts its next episode: empty, at index 0."""
        return QueueState(episode_id=self.episode_id + 1)


@dataclasses.dataclass(frozen=True, eq=False)
class Landing:
    """What a merge rule sees when a chunk lands (one robot, one moment)."""

    queued: IndexedActions
    """The queue now; ``queued.first_index`` is the robot's action index k."""
    chunk: IndexedActions
    """The chunk's rows still to play: indices ``[max(s, k), s + max_execution_horizon)``."""
    chunk_start: int
    """s: the action index of the observation the chunk was computed from."""
    newest_start: int | None
    """Start of the newest chunk merged before this one this episode; None if none."""
    episode_id: int
    """The episode both the queue and the chunk belong to."""

    @property
    def out_of_order(self) -> bool:
        """The chunk is older than one already merged (equal starts are in order)."""
        return self.newest_start is not None and self.chunk_start < self.newest_start


class MergeRule(abc.ABC):
    """Joins a landing chunk to the queue; one object per robot (some rules remember)."""

    name: ClassVar[str]

    @abc.abstractmethod
    def merge(self, landing: Landing) -> IndexedActions | None:
        """Called by `merge_chunk` when a chunk lands; returns the new queue, starting at
        the robot's action index, or None to drop the chunk."""

    def reset(self) -> None:  # noqa: B027
        """Called to forget every chunk seen (rules with memory also forget by themselves
        when a landing's episode changes)."""


@dataclasses.dataclass(frozen=True, eq=False)
class MergeResult:
    """What one landing did."""

    state: QueueState
    """The queue after the landing (the same state when the chunk was not merged)."""
    outcome: str
    """``applied``, ``dropped`` (the rule refused it: older than the newest chunk),
    ``stale-episode`` (computed in an earlier episode) or ``non-finite`` (it holds NaN
    or inf: refused whole)."""


def merge_chunk(
    rule: MergeRule,
    state: QueueState,
    actions: np.ndarray,
    start_index: int,
    *,
    max_execution_horizon: int,
    episode_id: int | None = None,
) -> MergeResult:
    """Land the chunk `actions` computed from the observation at `start_index` (in
    `episode_id`, by default the queue's) and merge it by `rule`; a chunk holding NaN or
    inf is not merged (outcome ``non-finite``).

    Raises ValueError for a chunk that is not a 2-D numeric array with >= 1 row, whose
    width differs from the queue's, that starts past the end of the queue, or that
    comes from an episode the queue has not reached.
    """
    if (
        not isinstance(actions, np.ndarray)
        or actions.ndim != 2
        or len(actions) == 0
        or actions.dtype.kind not in "biuf"
    ):
        shape = getattr(actions, "shape", type(actions).__name__)
        dtype = getattr(actions, "dtype", "")
        raise ValueError(f"a chunk must be a 2-D numeric array with >= 1 row, got {shape} {dtype}")
    start = _check_index("start_index", start_index)
    horizon = _check_index("max_execution_horizon", max_execution_horizon)
    if horizon < 1:
        raise ValueError("max_execution_horizon must be >= 1, got 0")
    episode = state.episode_id if episode_id is None else _check_index("episode_id", episode_id)
    if episode < state.episode_id:
        return MergeResult(state, "stale-episode")
    if episode > state.episode_id:
        raise ValueError(
            f"chunk of episode {episode} is ahead of the queue's episode {state.episode_id}: "
            "call QueueState.new_episode() when the robot starts one"
        )
    queued = state.queued
    if len(queued) and queued.actions.shape[1] != actions.shape[1]:
        raise ValueError(
            f"chunk has {actions.shape[1]} values per action, the queue {queued.actions.shape[1]}"
        )
    if start > queued.end_index:
        raise ValueError(
            f"chunk start {start} is past the end of the queue ({queued.end_index}): the "
            f"actions for {queued.end_index}..{start - 1} are unknown, so the robot could "
            "never reach it"
        )
    if nonfinite_rows(actions):
        return MergeResult(state, "non-finite")
    k = state.action_index
    chunk = IndexedActions(start, actions).between(k, start + horizon)
    if not len(chunk):
        # Every row passed: no rows, at the robot's index.
        chunk = IndexedActions(max(start, k), actions[:0])
    landing = Landing(queued, chunk, start, state.newest_start, episode)
    merged = rule.merge(landing)
    if merged is None:
        return MergeResult(state, "dropped")
    # Cheap invariants: the queue starts at the robot's index, one width throughout.
    assert merged.first_index == k, (rule.name, merged.first_index, k)
    assert not len(merged) or merged.actions.shape[1] == actions.shape[1], rule.name
    newest = start if state.newest_start is None else max(start, state.newest_start)
    return MergeResult(dataclasses.replace(state, queued=merged, newest_start=newest), "applied")


# ---- rules ------------------------------------------------------------------


class Replace(MergeRule):
    """Armory's rule: replace every queued action from the chunk's start on."""

    name = "replace"

    def merge(self, landing: Landing) -> IndexedActions | None:
        """Queued actions before s, then the chunk's rows; None when out of order."""
        if landing.out_of_order:
            return None
        kept = landing.queued.between(landing.queued.first_index, landing.chunk_start)
        return _join(kept, landing.chunk)


class _Blend(MergeRule):
    """LeRobot's aggregation: ``old_weight * old + (1 - old_weight) * new`` on the
    indices both hold, the new rows elsewhere; older chunks are dropped."""

    old_weight: ClassVar[float]

    def merge(self, landing: Landing) -> IndexedActions | None:
        """Queued actions before the chunk's rows, the blended overlap, the rest of the
        chunk; None when out of order."""
        if landing.out_of_order:
            return None
        queued, chunk = landing.queued, landing.chunk
        kept = queued.between(queued.first_index, chunk.first_index)
        overlap_end = max(chunk.first_index, min(chunk.end_index, queued.end_index))
        old = queued.between(chunk.first_index, overlap_end)
        new = chunk.between(chunk.first_index, overlap_end)
        dtype = _float_dtype(queued.actions, chunk.actions)
        if self.old_weight == 0.0 or not len(old):
            blended = new.actions.astype(dtype)
        else:
            mixed = self.old_weight * old.actions.astype(np.float64) + (
                1.0 - self.old_weight
            ) * new.actions.astype(np.float64)
            blended = mixed.astype(dtype)
        rest = chunk.between(overlap_end, chunk.end_index)
        return _join(kept, IndexedActions(new.first_index, blended), rest)


class WeightedAverage(_Blend):
    """LeRobot's default: 0.3 old + 0.7 new where both hold an action."""

    name = "weighted_average"
    old_weight = 0.3


class LatestOnly(_Blend):
    """LeRobot's `latest_only`: the new action where both hold one (as `replace`)."""

    name = "latest_only"
    old_weight = 0.0


class Average(_Blend):
    """LeRobot's `average`: 0.5 old + 0.5 new where both hold an action."""

    name = "average"
    old_weight = 0.5


class Conservative(_Blend):
    """LeRobot's `conservative`: 0.7 old + 0.3 new where both hold an action."""

    name = "conservative"
    old_weight = 0.7


class TemporalEnsemble(MergeRule):
    """ACT's temporal ensembling: each queued action is the average of every chunk's
    prediction for its index, weighted ``exp(-decay * i)``, i = 0 for the oldest."""

    name = "temporal_ensemble"

    def __init__(self, *, decay: float = 0.01, max_predictions: int | None = None) -> None:
        if not (
            isinstance(decay, int | float)
            and not isinstance(decay, bool)
            and math.isfinite(decay)
            and decay >= 0
        ):
            raise ValueError(f"decay must be a finite number >= 0, got {decay!r}")
        if max_predictions is not None and _check_index("max_predictions", max_predictions) < 1:
            raise ValueError("max_predictions must be >= 1 (or None), got 0")
        # m in exp(-m i): 0 weighs every prediction alike, larger favours older ones.
        self.decay = float(decay)
        # Most predictions kept per index (the oldest are forgotten first); None: one per
        # chunk start covering the index, as ACT keeps.
        self.max_predictions = None if max_predictions is None else int(max_predictions)
        self._episode_id: int | None = None
        # index -> [(chunk start, prediction)], oldest start first.
        self._history: dict[int, list[tuple[int, np.ndarray]]] = {}

    def reset(self) -> None:
        """Forget every prediction."""
        self._episode_id = None
        self._history.clear()

    def merge(self, landing: Landing) -> IndexedActions:
        """Record the chunk's predictions and queue the ensembles from its first row on
        (for an out-of-order chunk: only the indices already queued)."""
        if landing.episode_id != self._episode_id:
            self.reset()
            self._episode_id = landing.episode_id
        queued, chunk = landing.queued, landing.chunk
        end = queued.end_index if landing.out_of_order else chunk.end_index
        chunk = chunk.between(chunk.first_index, end)
        for index, row in zip(chunk.indices.tolist(), chunk.actions, strict=True):
            self._record(int(index), landing.chunk_start, row)
        dtype = _float_dtype(queued.actions, chunk.actions)
        ensembled = IndexedActions(
            chunk.first_index,
            np.array([self._ensemble(int(i)) for i in chunk.indices], dtype=dtype).reshape(
                len(chunk), chunk.actions.shape[1]
            ),
        )
        kept = queued.between(queued.first_index, chunk.first_index)
        tail = queued.between(chunk.end_index, queued.end_index) if landing.out_of_order else None
        merged = _join(kept, ensembled, *([tail] if tail is not None else []))
        # The history covers the queued indices only.
        for index in [i for i in self._history if not merged.first_index <= i < merged.end_index]:
            del self._history[index]
        return merged

    def _record(self, index: int, start: int, row: np.ndarray) -> None:
        """Insert one prediction in start order (replacing one with the same start)."""
        predictions = self._history.setdefault(index, [])
        starts = [s for s, _ in predictions]
        at = bisect.bisect_left(starts, start)
        entry = (start, np.array(row, dtype=np.float64))
        if at < len(predictions) and predictions[at][0] == start:
            predictions[at] = entry
        else:
            predictions.insert(at, entry)
        if self.max_predictions is not None:
            del predictions[: max(0, len(predictions) - self.max_predictions)]

    def _ensemble(self, index: int) -> np.ndarray:
        """The weighted average of the predictions for `index`, oldest weighted most."""
        rows = np.stack([row for _, row in self._history[index]])
        weights = np.exp(-self.decay * np.arange(len(rows)))
        return (weights[:, None] * rows).sum(axis=0) / weights.sum()


# ---- real-time chunking -------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class RtcRequest:
    """What a request carries for real-time chunking (see the module docstring)."""

    action_index: int
    """k: the robot's action index when the request is sent (its ``__armory__.action_index``)."""
    prefix: np.ndarray
    """(d, action_dim) frozen actions for ``k .. k+d-1``."""
    remainder: np.ndarray
    """(n, action_dim) the queued actions after the frozen ones."""
    delay: int
    """d: the number of frozen actions."""

    def to_wire(self) -> dict[str, Any]:
        """The top-level observation entries: `rtc_prefix` and `rtc_remainder` when they
        hold actions (an empty queue has no action width to send), and `rtc_delay`."""
        wire: dict[str, Any] = {
            key: rows
            for key, rows in ((RTC_PREFIX_KEY, self.prefix), (RTC_REMAINDER_KEY, self.remainder))
            if len(rows)
        }
        wire[RTC_DELAY_KEY] = self.delay
        return wire


def rtc_delay_ticks(round_trip_s: float, control_hz: float, *, margin_ticks: int = 0) -> int:
    """Ticks the robot plays before a reply sent now lands: ``ceil(round_trip_s *
    control_hz)`` plus `margin_ticks` (erring long only freezes one more action)."""
    if not (math.isfinite(round_trip_s) and round_trip_s >= 0):
        raise ValueError(f"round_trip_s must be finite and >= 0, got {round_trip_s!r}")
    if not (math.isfinite(control_hz) and control_hz > 0):
        raise ValueError(f"control_hz must be finite and > 0, got {control_hz!r}")
    margin = _check_index("margin_ticks", margin_ticks)
    return max(0, math.ceil(round_trip_s * control_hz - 1e-9)) + margin


def rtc_request(queued: IndexedActions, delay_ticks: int) -> RtcRequest:
    """Freeze the first `delay_ticks` queued actions (all of them if fewer are queued):
    the fields to send with a request made now. Pure: `Rtc.freeze` also remembers them."""
    delay = min(_check_index("delay_ticks", delay_ticks), len(queued))
    actions = queued.actions
    return RtcRequest(
        action_index=queued.first_index,
        prefix=np.array(actions[:delay]),
        remainder=np.array(actions[delay:]),
        delay=delay,
    )


class Rtc(MergeRule):
    """Real-time chunking: the frozen prefix of the request, then the chunk from s + d."""

    name = "rtc"

    def __init__(self, *, max_pending: int = 8) -> None:
        if _check_index("max_pending", max_pending) < 1:
            raise ValueError("max_pending must be >= 1, got 0")
        # Most frozen requests remembered (the newest are kept).
        self.max_pending = int(max_pending)
        self._episode_id: int | None = None
        # request index (the chunk start its reply will name) -> frozen actions.
        self._frozen: dict[int, IndexedActions] = {}

    def reset(self) -> None:
        """Forget every frozen prefix."""
        self._episode_id = None
        self._frozen.clear()

    def freeze(self, queued: IndexedActions, delay_ticks: int, *, episode_id: int) -> RtcRequest:
        """Called before sending a request at index ``queued.first_index``: freezes the
        first `delay_ticks` queued actions and returns the fields to send. `episode_id` is
        the queue's (`QueueState.episode_id`): a landing of another episode forgets the
        prefix (`ActionQueue.freeze` passes its own)."""
        self._sync_episode(_check_index("episode_id", episode_id))
        request = rtc_request(queued, delay_ticks)
        self._frozen.pop(request.action_index, None)
        self._frozen[request.action_index] = IndexedActions(request.action_index, request.prefix)
        while len(self._frozen) > self.max_pending:
            del self._frozen[next(iter(self._frozen))]
        return request

    def merge(self, landing: Landing) -> IndexedActions | None:
        """Queued actions before s, the frozen actions not yet executed, then the chunk's
        rows from s + d (d = 0 when no request froze any at s); None when out of order."""
        self._sync_episode(landing.episode_id)
        start = landing.chunk_start
        frozen = self._frozen.pop(start, None)
        for older in [s for s in self._frozen if s < start]:
            del self._frozen[older]
        if landing.out_of_order:
            return None
        if frozen is None:
            frozen = IndexedActions.empty(start)
        queued, chunk = landing.queued, landing.chunk
        k = queued.first_index
        kept = queued.between(k, start)
        frozen_left = frozen.between(k, frozen.end_index)
        rest = chunk.between(max(frozen.end_index, k), chunk.end_index)
        return _join(kept, frozen_left, rest)

    def _sync_episode(self, episode_id: int) -> None:
        """Forget the frozen prefixes of another episode."""
        if episode_id != self._episode_id:
            self._frozen.clear()
            self._episode_id = episode_id


# ---- registry -----------------------------------------------------------------

MERGE_RULES: dict[str, Callable[..., MergeRule]] = {
    rule.name: rule
    for rule in (
        Replace,
        WeightedAverage,
        LatestOnly,
        Average,
        Conservative,
        TemporalEnsemble,
        Rtc,
    )
}
"""Every merge rule by name (`replace` is the default)."""


def make_merge_rule(name: str = Replace.name, **options: Any) -> MergeRule:
    """A new rule called `name`, built with `options` (e.g. ``decay=0.05`` for
    `temporal_ensemble`).

    Raises ValueError listing every valid name when `name` is unknown, or naming an
    option the rule does not take.
    """
    try:
        factory = MERGE_RULES[name]
    except KeyError:
        raise ValueError(f"unknown merge rule {name!r}; valid: {', '.join(MERGE_RULES)}") from None
    try:
        return factory(**options)
    except TypeError as exc:
        raise ValueError(f"merge rule {name!r}: bad options {sorted(options)} ({exc})") from None


# ---- helpers ------------------------------------------------------------------


def nonfinite_rows(actions: np.ndarray) -> list[int]:
    """The rows of a 2-D chunk that hold NaN or inf (none for an integer chunk)."""
    if actions.dtype.kind != "f":
        return []
    return np.flatnonzero(~np.isfinite(actions).all(axis=1)).tolist()


def _float_dtype(*arrays: np.ndarray) -> np.dtype:
    """The float dtype blended actions take: float32 for float32 chunks."""
    return np.result_type(*(a.dtype for a in arrays if a.size), np.float32)


def _join(*parts: IndexedActions) -> IndexedActions:
    """Contiguous parts, in order, as one (empty parts are skipped)."""
    first = parts[0].first_index
    rows = [p for p in parts if len(p)]
    if not rows:
        return IndexedActions(first, np.zeros((0, parts[-1].actions.shape[1]), np.float32))
    for before, after in itertools.pairwise(rows):
        assert before.end_index == after.first_index, (before.end_index, after.first_index)
    assert rows[0].first_index == first, (rows[0].first_index, first)
    if len(rows) == 1:
        return rows[0]
    dtype = np.result_type(*(p.actions.dtype for p in rows))
    return IndexedActions(first, np.concatenate([p.actions.astype(dtype) for p in rows]))
