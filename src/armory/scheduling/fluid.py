"""The fluid relaxation of a fleet, as a linear program.

Variables, per second of steady state: ``a_i`` actions robot i executes, ``r_ib``
chunks it receives from batches of size b, ``n_b`` batches of size b the GPU
runs. With ``f_i`` the robot's rate, ``E_i`` its max execution horizon, ``h_i`` the
actions its client still holds when it asks (0 unless given) and
``l_ib = latency(b) + uplink_i + downlink_i``:

- ``a_i <= f_i``                                  (a robot cannot outrun its clock)
- ``a_i <= (E_i - h_i) * sum_b r_ib``             (each chunk adds at most E_i - h_i actions)
- ``2 a_i <= f_i + sum_b r_ib (E_i - floor(f_i l_ib))``  (latency costs actions or ticks)
- ``sum_i r_ib <= b n_b``, ``r_ib <= n_b``        (a batch of b serves b distinct robots)
- ``sum_b n_b latency(b) <= K``                   (K GPUs, one by default)

With ``min_execution_horizon`` ``k_i`` (robots with one request in flight, whose
chunk starts are at least ``k_i`` apart) a fourth:

- ``a_i + sum_b r_ib (m_ib - E_i + k_i) <= f_i``   (a round trip past ``E_i - k_i`` ticks starves)

where ``m_ib`` is the ticks a chunk's round trip holds at least (``floor(f_i l_ib)``;
further valid estimates each add their rows). docs/scheduling.md derives the third
and fourth constraints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp


@dataclass(frozen=True)
class FluidSolution:
    """Steady-state rates per second of the best fluid schedule."""

    actions_per_s: np.ndarray
    """a_i: actions robot i executes per second."""
    chunks_per_s: np.ndarray
    """r_ib (robots x sizes): chunks robot i gets from batches of size b = column + 1 (or
    the column's entry of ``batch_sizes``)."""
    batches_per_s: np.ndarray
    """n_b (sizes): batches of size b = index + 1 (or the entry of ``batch_sizes``) per
    second."""


def solve_fluid(
    control_hz: np.ndarray,
    max_execution_horizon: np.ndarray,
    delay_s: np.ndarray,
    latency_s: np.ndarray,
    *,
    weight: np.ndarray | None = None,
    gpu_cost: float = 0.0,
    min_total_actions_per_s: float | None = None,
    count: np.ndarray | None = None,
    expected_ticks: bool = False,
    window_ticks: Sequence[np.ndarray] = (),
    min_execution_horizon: np.ndarray | None = None,
    evenness: float = 0.0,
    num_gpus: float = 1.0,
    asks_ahead: np.ndarray | None = None,
    batch_sizes: np.ndarray | None = None,
) -> FluidSolution:
    """Maximise ``sum w_i a_i - gpu_cost * min(w) * GPU seconds`` over the fluid
    constraints: ``gpu_cost`` is a GPU second's worth in actions of the lightest robot,
    and weights are relative (scaling every weight changes nothing; the program weighs
    them against the heaviest).

    ``latency_s[j]`` is the forward pass of a batch of ``j + 1``; ``delay_s[i]`` the
    smallest uplink plus downlink of robot i. ``min_total_actions_per_s`` adds the
    constraint ``sum a_i >= value`` (to ask what weighted throughput is possible at
    a given starvation). With ``count``, entry i stands for ``count[i]`` identical
    robots (same rate, horizon, delays and weight): the optimum is the same as with
    every robot listed, since averaging an optimum over identical robots is optimal
    too, and the program stays small for a thousand robots.

    With ``expected_ticks`` a chunk is charged ``f l`` ticks instead of ``floor(f l)``:
    the mean, over a uniformly random tick phase, of the ticks a window of ``l``
    seconds holds, rather than the fewest. That is no longer a bound, but closer to
    what a fleet whose batches do not start on its robots' ticks pays.

    Each matrix of ``window_ticks`` (robots x sizes) is a further ``m_ib``, valid on
    its own, that adds its own third (and fourth) constraint beside ``floor(f l)``'s.
    ``min_execution_horizon`` adds the fourth constraint, valid where a robot's
    request windows do not overlap.

    With ``evenness`` the objective also values the least share of its ticks any robot
    is served, at ``evenness`` times the fleet's weighted demand per unit of share: of
    optima alike in weighted motion (equal weights make many), the one that abandons
    no robot it need not. A small value only breaks such ties.

    ``asks_ahead`` (``h_i``): for a robot whose client asks once per chunk while it still
    holds that many actions (a threshold client), each chunk overlaps them and adds at
    most ``E_i - h_i``, however soon it lands.

    ``batch_sizes``: the sizes ``latency_s`` stands for, when not every size from one
    up (solution columns follow them).

    ``num_gpus`` GPUs pool their seconds (K per second): a relaxation of K GPUs that
    each batch their own robots, since any schedule of theirs is a schedule of the pool.
    """
    if not num_gpus > 0:
        raise ValueError(f"num_gpus must be > 0, got {num_gpus}")
    f = np.asarray(control_hz, dtype=np.float64)
    e = np.asarray(max_execution_horizon, dtype=np.float64)
    w = np.ones_like(f) if weight is None else np.asarray(weight, dtype=np.float64)
    # Relative to the heaviest robot: the objective's scale never meets the solver's
    # absolute tolerances, whatever the weights' scale.
    w = w / w.max()
    m = np.ones_like(f) if count is None else np.asarray(count, dtype=np.float64)
    latency = np.asarray(latency_s, dtype=np.float64)
    n, sizes = f.size, latency.size
    b_values = (
        np.arange(1, sizes + 1, dtype=np.float64)
        if batch_sizes is None
        else np.asarray(batch_sizes, dtype=np.float64)
    )
    num_vars = n + n * sizes + sizes
    even_col = num_vars  # with evenness, t: the least share of its ticks any robot gets
    num_vars += 1 if evenness else 0
    r_col = n + np.arange(n * sizes).reshape(n, sizes)
    nb_col = n + n * sizes + np.arange(sizes)
    l_ib = latency[None, :] + np.asarray(delay_s, dtype=np.float64)[:, None]
    ticks_ib = f[:, None] * l_ib
    charges = [ticks_ib if expected_ticks else np.floor(ticks_ib + 1e-9)]
    charges += [np.asarray(c, dtype=np.float64).reshape(n, sizes) for c in window_ticks]

    k = None if min_execution_horizon is None else np.asarray(min_execution_horizon, np.float64)
    robot_rows = np.arange(n)
    pairs = np.repeat(robot_rows, sizes)
    # Rows 0..n-1: a_i - (E_i - h_i) sum_b r_ib <= 0
    rows = [robot_rows, pairs]
    cols = [robot_rows, r_col.ravel()]
    kept = e if asks_ahead is None else np.maximum(e - np.asarray(asks_ahead, np.float64), 1.0)
    vals = [np.ones(n), -np.repeat(kept, sizes)]
    rhs = [np.zeros(n)]
    base = n
    for charge_ib in charges:
        # 2 a_i - sum_b r_ib (E_i - m_ib) <= f_i
        # (a window of l seconds holds at least floor(f l) ticks; f l with expected_ticks)
        rows += [base + robot_rows, base + pairs]
        cols += [robot_rows, r_col.ravel()]
        vals += [2.0 * np.ones(n), -(e[:, None] - charge_ib).ravel()]
        rhs.append(f)
        base += n
        if k is not None:
            # a_i + sum_b r_ib (m_ib - E_i + k_i) <= f_i
            rows += [base + robot_rows, base + pairs]
            cols += [robot_rows, r_col.ravel()]
            vals += [np.ones(n), (charge_ib - e[:, None] + k[:, None]).ravel()]
            rhs.append(f)
            base += n
    # Rows: sum_i r_ib - b n_b <= 0
    rows += [base + np.tile(np.arange(sizes), n), base + np.arange(sizes)]
    cols += [r_col.ravel(), nb_col]
    vals += [np.repeat(m, sizes), -b_values]
    rhs.append(np.zeros(sizes))
    # Rows: r_ib - n_b <= 0
    base += sizes
    pair = np.arange(n * sizes)
    rows += [base + pair, base + pair]
    cols += [r_col.ravel(), np.tile(nb_col, n)]
    vals += [np.ones(n * sizes), -np.ones(n * sizes)]
    rhs.append(np.zeros(n * sizes))
    # Last row: sum_b n_b latency(b) <= K
    base += n * sizes
    rows.append(np.full(sizes, base))
    cols.append(nb_col)
    vals.append(latency)
    rhs.append(np.full(1, float(num_gpus)))
    num_rows = base + 1
    if evenness:
        # Rows: t - a_i / f_i <= 0
        rows += [num_rows + robot_rows, num_rows + robot_rows]
        cols += [np.full(n, even_col), robot_rows]
        vals += [np.ones(n), -1.0 / f]
        rhs.append(np.zeros(n))
        num_rows += n
    if min_total_actions_per_s is not None:
        # -sum a_i <= -value
        rows.append(np.full(n, num_rows))
        cols.append(np.arange(n))
        vals.append(-m)
        rhs.append(np.array([-min_total_actions_per_s]))
        num_rows += 1
    a_ub = sparse.csr_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(num_rows, num_vars),
    )
    cost = np.zeros(num_vars)
    cost[:n] = -w * m
    cost[nb_col] = gpu_cost * float(w.min()) * latency
    bounds = np.zeros((num_vars, 2))
    bounds[:, 1] = np.inf
    bounds[:n, 1] = f
    if evenness:
        cost[even_col] = -evenness * float(w @ (m * f))
        bounds[even_col, 1] = 1.0
    # HiGHS through milp (no integer variables: a linear program): the same solver and
    # solution as linprog's "highs", with less of scipy's set-up around it.
    result = milp(
        cost,
        constraints=LinearConstraint(a_ub, -np.inf, np.concatenate(rhs)),
        bounds=Bounds(bounds[:, 0], bounds[:, 1]),
    )
    if not result.success:
        raise RuntimeError(f"fluid LP failed: {result.message}")
    x = result.x
    return FluidSolution(
        actions_per_s=x[:n],
        chunks_per_s=x[n : n + n * sizes].reshape(n, sizes),
        batches_per_s=x[n + n * sizes : n + n * sizes + sizes],
    )
