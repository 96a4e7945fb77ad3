"""Exact min-cost integer transport: the oracle of the optimal-transport MP-CSB instances.

``solve_transport(cost, supply, demand)`` returns an integer plan ``a`` (``(n_sup, n_dem)``)
minimising ``<a, cost>`` subject to ``a 1 = supply``, ``a^T 1 = demand``, ``a >= 0``. The
constraint matrix of the transportation polytope is totally unimodular, so the LP relaxation
solved by a simplex method (scipy's HiGHS dual simplex) ends at an integral vertex. Entropic
solvers (Sinkhorn, Cuturi 2013, the reference the MP-CSB paper gives) are not integral and are
never used here.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

from ..core.validation import InvalidParameterError

__all__ = ["transport_constraints", "solve_transport", "transport_plans", "greedy_two_demanders"]


def transport_constraints(supply, demand, *, reduced: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Equality constraints ``A x = b`` of the transportation polytope over ``x = plan.ravel()``.

    Rows: one per supplier (row sums), one per demander (column sums). With ``reduced`` the last
    demander row is dropped (it is implied by the others), leaving a full-row-rank ``A``.

    >>> A, b = transport_constraints([1, 2], [2, 1])
    >>> A.astype(int).tolist(), b.tolist()
    ([[1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]], [1.0, 2.0, 2.0])
    """
    u = np.asarray(supply, dtype=float)
    v = np.asarray(demand, dtype=float)
    n_sup, n_dem = u.size, v.size
    rows = np.kron(np.eye(n_sup), np.ones((1, n_dem)))
    cols = np.kron(np.ones((1, n_sup)), np.eye(n_dem))
    A = np.vstack([rows, cols])
    b = np.concatenate([u, v])
    if reduced:
        A, b = A[:-1], b[:-1]
    return A, b


def _check_margins(supply, demand) -> tuple[np.ndarray, np.ndarray]:
    u = np.asarray(supply)
    v = np.asarray(demand)
    if u.ndim != 1 or v.ndim != 1 or np.any(u < 0) or np.any(v < 0) or np.any(u != np.round(u)) or np.any(v != np.round(v)):
        raise InvalidParameterError(f"supply and demand must be 1-d non-negative integers. Got {supply!r} and {demand!r} instead.")
    if u.sum() != v.sum():
        raise InvalidParameterError(f"Total supply must equal total demand. Got {u.sum()} and {v.sum()} instead.")
    return u.astype(np.int64), v.astype(np.int64)


def solve_transport(cost, supply, demand) -> np.ndarray:
    """Min-cost integer transport plan by the LP relaxation (HiGHS dual simplex), ``(n_sup, n_dem)`` int64.

    >>> solve_transport([[1.0, 0.0], [0.0, 1.0]], [2, 1], [1, 2]).tolist()
    [[0, 2], [1, 0]]
    """
    u, v = _check_margins(supply, demand)
    c = np.asarray(cost, dtype=float)
    if c.shape != (u.size, v.size) or not np.all(np.isfinite(c)):
        raise InvalidParameterError(f"cost must be a finite ({u.size}, {v.size}) matrix. Got shape {c.shape} instead.")
    A, b = transport_constraints(u, v, reduced=False)
    res = linprog(c.ravel(), A_eq=A, b_eq=b, bounds=(0, None), method="highs-ds")
    if res.status != 0:  # pragma: no cover - balanced margins are always feasible
        raise RuntimeError(f"HiGHS failed on a transport problem: {res.message}")
    plan = np.rint(res.x).astype(np.int64).reshape(u.size, v.size)
    assert np.abs(res.x - plan.ravel()).max() < 1e-6, "a simplex vertex of a TU polytope must be integral"
    return plan


def transport_plans(supply, demand, limit: int = 100_000) -> np.ndarray | None:
    """Every integer plan, ``(n_plans, n_sup * n_dem)`` int64 (row-major), or ``None`` past ``limit``.

    >>> transport_plans([1, 1], [1, 1]).tolist()
    [[0, 1, 1, 0], [1, 0, 0, 1]]
    """
    u, v = _check_margins(supply, demand)
    n_dem = v.size
    out: list[np.ndarray] = []

    def rows_for(total: int, caps: np.ndarray):
        if caps.size == 1:
            if total <= caps[0]:
                yield [total]
            return
        rest_cap = caps[1:].sum()
        for first in range(max(0, total - rest_cap), min(total, caps[0]) + 1):
            for tail in rows_for(total - first, caps[1:]):
                yield [first, *tail]

    def recurse(x: int, remaining: np.ndarray, prefix: list[int]) -> bool:
        if x == u.size:
            out.append(np.array(prefix, dtype=np.int64))
            return len(out) <= limit
        for row in rows_for(int(u[x]), remaining):
            row = np.array(row, dtype=np.int64)
            if not recurse(x + 1, remaining - row, prefix + row.tolist()):
                return False
        return True

    if not recurse(0, v.copy(), []):
        return None
    plans = np.array(out, dtype=np.int64).reshape(-1, u.size * n_dem)
    return plans[np.lexsort(plans.T[::-1])]


def greedy_two_demanders(theta: np.ndarray, supply, demand) -> np.ndarray:
    """Exact oracle for two demanders, vectorised over runs: ``theta`` ``(n_runs, n_sup * 2)``.

    With two demanders a plan is fixed by ``a_x1``; the cost is a constant plus
    ``sum_x a_x1 (theta_x1 - theta_x2)`` under ``sum_x a_x1 = v_1`` and
    ``max(0, u_x - v_2) <= a_x1 <= min(u_x, v_1)``: a bounded single-constraint LP, solved
    exactly by filling the cheapest differences first.

    >>> greedy_two_demanders(np.array([[0.1, 0.5, 0.4, 0.2, 0.3, 0.3]]), [1, 1, 1], [2, 1]).tolist()
    [[1, 0, 0, 1, 1, 0]]
    """
    u = np.asarray(supply, dtype=np.int64)
    v = np.asarray(demand, dtype=np.int64)
    th = np.asarray(theta, dtype=float).reshape(theta.shape[0], u.size, 2)
    lo = np.maximum(0, u - v[1])
    hi = np.minimum(u, v[0])
    delta = th[:, :, 0] - th[:, :, 1]
    order = np.argsort(delta, axis=1, kind="stable")
    first = np.broadcast_to(lo, delta.shape).copy()
    remaining = np.full(delta.shape[0], v[0] - lo.sum())
    rows = np.arange(delta.shape[0])
    room = hi - lo
    for k in range(u.size):
        idx = order[:, k]
        take = np.minimum(room[idx], remaining)
        first[rows, idx] += take
        remaining -= take
    plan = np.stack([first, u[None, :] - first], axis=2)
    return plan.reshape(theta.shape[0], -1)
