"""Action sets of multi-play combinatorial semi-bandits: what an allocation may be, and its oracles.

An action set is described by a JSON-friendly dict (so a policy can keep it as a hyperparameter
and an environment can hand it over), built into an :class:`ActionSet` by :func:`make_action_set`:

* ``{"kind": "transport", "supply": [u_1..], "demand": [v_1..]}``: integer transport plans,
  arm ``(x, y)`` at index ``x * n_dem + y``, ``n_xy = min(u_x, v_y)``; losses are minimised.
* ``{"kind": "knapsack", "weights": [w_1..], "capacity": W}`` (optional ``"bounds"``): integer
  knapsack fillings, ``n_i = min(bounds_i, W // w_i)``; rewards are maximised.

Every action set offers ``best(values)`` (the paper's Oracle, batched over runs), ``contains``,
``plans()`` (the enumerated set when small), ``duplicate()`` (the binary instance of the
duplicating technique, with the map back) and, for transport, the equality constraints of its
convex hull, which GenLBINFV's FTRL step needs.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.optimize import linprog

from ..core.validation import InvalidParameterError
from .knapsack import solve_knapsack
from .transport import greedy_two_demanders, solve_transport, transport_constraints, transport_plans

__all__ = ["ActionSet", "TransportActions", "KnapsackActions", "make_action_set", "decompose", "decompose_batch", "sample_from_hull", "systematic_sample", "round_two_demanders"]

ENUMERATION_LIMIT = 5000


class ActionSet:
    """Feasible integer allocations ``a`` in ``Z_{>=0}^d`` with per-arm caps ``n``."""

    kind: str = ""
    #: ``"min"`` when samples are losses, ``"max"`` when they are rewards.
    sense: str = "min"
    n_arms: int
    caps: np.ndarray
    #: For duplicated sets: original arm of every binary arm, else ``None``.
    owner: np.ndarray | None = None

    def spec(self) -> dict:
        raise NotImplementedError

    @functools.cached_property
    def _plans(self) -> np.ndarray | None:
        return self._enumerate(ENUMERATION_LIMIT)

    def plans(self) -> np.ndarray | None:
        """Every action, ``(n_actions, d)`` int64, or ``None`` when there are more than a few thousand."""
        return self._plans

    def _enumerate(self, limit: int) -> np.ndarray | None:
        raise NotImplementedError

    def best(self, values: np.ndarray) -> np.ndarray:
        """``argmin`` (sense ``"min"``) or ``argmax`` (``"max"``) of ``<a, values[r]>`` per run, ``(n_runs, d)``."""
        plans = self.plans()
        if plans is not None:
            score = values @ plans.T.astype(float)
            pick = score.argmin(axis=1) if self.sense == "min" else score.argmax(axis=1)
            return plans[pick]
        return self._solve(values)

    def _solve(self, values: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def contains(self, actions: np.ndarray) -> np.ndarray:
        """Whether each row of ``actions`` ``(n, d)`` is feasible, ``(n,)`` bool."""
        raise NotImplementedError

    def duplicate(self) -> "ActionSet":
        """The binary instance of the duplicating technique (``owner`` maps binary arms back)."""
        raise NotImplementedError

    def expand(self, actions: np.ndarray) -> np.ndarray:
        """A binary action of :meth:`duplicate` that aggregates to ``actions`` (the first copies)."""
        raise NotImplementedError

    def face_point(self, zero: np.ndarray) -> np.ndarray | None:
        """An action with ``a_i = 0`` wherever ``zero`` is True, or ``None`` when none exists."""
        plans = self.plans()
        if plans is not None:
            ok = ~np.any(plans[:, zero] > 0, axis=1)
            return plans[np.argmax(ok)] if ok.any() else None
        return self._face_lp(zero)

    def _face_lp(self, zero: np.ndarray) -> np.ndarray | None:
        raise NotImplementedError


class TransportActions(ActionSet):
    """Integer transport plans between ``supply`` and ``demand`` (arms are edges, row-major).

    >>> s = TransportActions([1, 4, 5], [4, 6])
    >>> s.n_arms, s.caps.tolist(), len(s.plans())
    (6, [1, 1, 4, 4, 4, 5], 9)
    >>> s.best(np.array([[0.35, 0.21, 0.12, 0.11, 0.43, 0.47]])).tolist()
    [[0, 1, 0, 4, 4, 1]]
    """

    kind = "transport"
    sense = "min"

    def __init__(self, supply, demand, owner=None) -> None:
        self.supply = np.asarray(supply, dtype=np.int64)
        self.demand = np.asarray(demand, dtype=np.int64)
        if self.supply.sum() != self.demand.sum() or self.supply.size < 1 or self.demand.size < 1:
            raise InvalidParameterError(f"A transport action set needs total supply = total demand. Got {supply!r} and {demand!r}.")
        self.n_arms = int(self.supply.size * self.demand.size)
        self.caps = np.minimum(self.supply[:, None], self.demand[None, :]).ravel()
        self.A, self.b = transport_constraints(self.supply, self.demand, reduced=True)
        self.owner = None if owner is None else np.asarray(owner, dtype=np.int64)

    def spec(self) -> dict:
        return {"kind": "transport", "supply": self.supply.tolist(), "demand": self.demand.tolist()}

    def _enumerate(self, limit: int) -> np.ndarray | None:
        return transport_plans(self.supply, self.demand, limit=limit)

    def _solve(self, values: np.ndarray) -> np.ndarray:
        if self.demand.size == 2:
            return greedy_two_demanders(values, self.supply, self.demand)
        shape = (self.supply.size, self.demand.size)
        return np.stack([solve_transport(v.reshape(shape), self.supply, self.demand).ravel() for v in values])

    def contains(self, actions: np.ndarray) -> np.ndarray:
        a = np.asarray(actions).reshape(-1, self.supply.size, self.demand.size)
        return (a >= 0).all(axis=(1, 2)) & (a.sum(axis=2) == self.supply).all(axis=1) & (a.sum(axis=1) == self.demand).all(axis=1)

    def interior_point(self) -> np.ndarray:
        """The proportional plan ``u_x v_y / sum(u)``: strictly inside when there are 2+ suppliers and demanders."""
        return (self.supply[:, None] * self.demand[None, :] / self.supply.sum()).ravel().astype(float)

    def duplicate(self) -> "TransportActions":
        trucks = int(self.supply.sum())
        supplier = np.repeat(np.arange(self.supply.size), self.supply)
        owner = (supplier[:, None] * self.demand.size + np.arange(self.demand.size)[None, :]).ravel()
        return TransportActions(np.ones(trucks, dtype=np.int64), self.demand, owner=owner)

    def expand(self, actions: np.ndarray) -> np.ndarray:
        a = np.asarray(actions).reshape(-1, self.supply.size, self.demand.size)
        out = np.zeros((a.shape[0], int(self.supply.sum()), self.demand.size), dtype=np.int64)
        start = np.concatenate([[0], np.cumsum(self.supply)[:-1]])
        for r in range(a.shape[0]):
            for x in range(self.supply.size):
                dest = np.repeat(np.arange(self.demand.size), a[r, x])
                out[r, start[x] + np.arange(dest.size), dest] = 1
        return out.reshape(a.shape[0], -1)

    def _face_lp(self, zero: np.ndarray) -> np.ndarray | None:
        A, b = transport_constraints(self.supply, self.demand, reduced=False)
        bounds = [(0, 0) if z else (0, None) for z in zero]
        res = linprog(np.zeros(self.n_arms), A_eq=A, b_eq=b, bounds=bounds, method="highs-ds")
        return None if res.status != 0 else np.rint(res.x).astype(np.int64)


class KnapsackActions(ActionSet):
    """Integer knapsack fillings: ``weights . a <= capacity``, ``0 <= a_i <= n_i``; rewards are maximised.

    >>> s = KnapsackActions([2, 3, 4, 5, 7], 20)
    >>> s.caps.tolist()
    [10, 6, 5, 4, 2]
    >>> s.best(np.array([[0.10, 0.17, 0.26, 0.30, 0.45]])).tolist()
    [[0, 0, 5, 0, 0]]
    """

    kind = "knapsack"
    sense = "max"

    def __init__(self, weights, capacity, bounds=None, owner=None) -> None:
        self.weights = np.asarray(weights, dtype=np.int64)
        self.capacity = int(capacity)
        if self.weights.ndim != 1 or np.any(self.weights < 1) or self.capacity < 1:
            raise InvalidParameterError(f"A knapsack needs positive integer weights and capacity. Got {weights!r}, {capacity!r}.")
        top = self.capacity // self.weights
        self.caps = top if bounds is None else np.minimum(np.asarray(bounds, dtype=np.int64), top)
        self.bounds = None if bounds is None else np.asarray(bounds, dtype=np.int64)
        self.n_arms = int(self.weights.size)
        self.owner = None if owner is None else np.asarray(owner, dtype=np.int64)

    def spec(self) -> dict:
        out = {"kind": "knapsack", "weights": self.weights.tolist(), "capacity": self.capacity}
        if self.bounds is not None:
            out["bounds"] = self.bounds.tolist()
        return out

    def _enumerate(self, limit: int) -> np.ndarray | None:
        out: list[list[int]] = []

        def recurse(i: int, room: int, prefix: list[int]) -> bool:
            if i == self.n_arms:
                out.append(prefix)
                return len(out) <= limit
            for k in range(min(int(self.caps[i]), room // int(self.weights[i])) + 1):
                if not recurse(i + 1, room - k * int(self.weights[i]), prefix + [k]):
                    return False
            return True

        return np.array(out, dtype=np.int64) if recurse(0, self.capacity, []) else None

    def best(self, values: np.ndarray) -> np.ndarray:
        return self._solve(values)

    def _solve(self, values: np.ndarray) -> np.ndarray:
        return solve_knapsack(np.asarray(values, dtype=float), self.weights, self.capacity, self.caps)

    def contains(self, actions: np.ndarray) -> np.ndarray:
        a = np.asarray(actions)
        return (a >= 0).all(axis=1) & (a <= self.caps).all(axis=1) & (a @ self.weights <= self.capacity)

    def duplicate(self) -> "KnapsackActions":
        owner = np.repeat(np.arange(self.n_arms), self.caps)
        return KnapsackActions(self.weights[owner], self.capacity, bounds=np.ones(owner.size, dtype=np.int64), owner=owner)

    def expand(self, actions: np.ndarray) -> np.ndarray:
        a = np.asarray(actions)
        start = np.concatenate([[0], np.cumsum(self.caps)[:-1]])
        copy_index = np.arange(int(self.caps.sum())) - np.repeat(start, self.caps)
        return (copy_index[None, :] < np.repeat(a, self.caps, axis=1)).astype(np.int64)

    def _face_lp(self, zero: np.ndarray) -> np.ndarray | None:
        return np.zeros(self.n_arms, dtype=np.int64)  # the empty knapsack lies on every face x_i = 0


def make_action_set(spec: dict) -> ActionSet:
    """Build the :class:`ActionSet` a spec dict describes (see the module docstring)."""
    if not isinstance(spec, dict) or "kind" not in spec:
        raise InvalidParameterError(f"An action set is a dict with a 'kind' key. Got {spec!r} instead.")
    kind = spec["kind"]
    if kind == "transport":
        return TransportActions(spec["supply"], spec["demand"])
    if kind == "knapsack":
        return KnapsackActions(spec["weights"], spec["capacity"], spec.get("bounds"))
    raise InvalidParameterError(f"Unknown action set kind {kind!r}: use 'transport' or 'knapsack'.")


def decompose(x: np.ndarray, space: ActionSet, tol: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """Write ``x`` in ``conv(space)`` as a convex combination of at most ``d + 1`` actions.

    Face walking: take an action ``v`` on the current face, move ``y`` away from
    ``v`` until a coordinate hits zero, fix that coordinate (tracked combinatorially, never by a
    threshold) and repeat on the smaller face. Returns ``(weights (k,), actions (k, d))``.

    >>> s = TransportActions([1, 4, 5], [4, 6])
    >>> w, acts = decompose(s.plans().mean(axis=0), s)
    >>> bool(abs(w.sum() - 1) < 1e-12), bool(np.abs(w @ acts - s.plans().mean(axis=0)).max() < 1e-9)
    (True, True)
    """
    weights, comps = decompose_batch(np.asarray(x, dtype=float)[None], space, tol)
    keep = weights[0] > 0
    return weights[0][keep], comps[0][keep]


def decompose_batch(x: np.ndarray, space: ActionSet, tol: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """:func:`decompose` for every row of ``x`` ``(n_runs, d)`` at once.

    Returns ``weights`` ``(n_runs, d + 1)`` (zero-padded) and ``actions`` ``(n_runs, d + 1, d)``.
    Over an enumerated action set every step is one array operation across runs; otherwise the
    face's action comes from an LP per run. Rows whose reconstruction misses ``x`` by more than
    ``tol`` (floating error near a vertex) are redone by an LP over the enumerated set.
    """
    n_runs, d = x.shape
    y = x.copy()
    zero = np.zeros((n_runs, d), dtype=bool)
    weights = np.zeros((n_runs, d + 1))
    comps = np.zeros((n_runs, d + 1, d), dtype=np.int64)
    w_left = np.ones(n_runs)
    live = np.ones(n_runs, dtype=bool)
    plans = space.plans()
    rows = np.arange(n_runs)
    for step in range(d + 1):
        if not live.any():
            break
        if plans is not None:
            ok = ~np.any((plans[None, :, :] > 0) & zero[:, None, :], axis=2)  # (runs, plans) on the face
            dist = np.where(ok, np.abs(plans[None, :, :] - y[:, None, :]).sum(axis=2), np.inf)
            v = plans[dist.argmin(axis=1)]
        else:
            v = np.array([space.face_point(z) if alive else np.zeros(d, dtype=np.int64) for z, alive in zip(zero, live)])
        delta = np.abs(v - y).max(axis=1)
        stop = live & ((delta <= tol) | (w_left * delta <= 1e-12) | (step == d))
        up = (~zero) & (v > y)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(up, y / np.where(up, v - y, 1.0), np.inf)
        j = ratios.argmin(axis=1)
        mu = ratios[rows, j]
        walk = live & ~stop & np.isfinite(mu)
        stop = live & ~walk
        comps[:, step] = np.where(live[:, None], v, 0)
        weights[stop, step] = w_left[stop]
        share = np.where(walk, mu / (1 + np.where(walk, mu, 0)), 0.0)
        weights[walk, step] = w_left[walk] * share[walk]
        w_left = np.where(walk, w_left / (1 + np.where(walk, mu, 0)), w_left)
        y = np.where(walk[:, None], y + np.where(walk, mu, 0)[:, None] * (y - v), y)
        zero[rows[walk], j[walk]] = True
        y[zero] = 0.0
        live = walk
    weights = np.clip(weights, 0, None)
    total = weights.sum(axis=1, keepdims=True)
    weights = weights / np.where(total > 0, total, 1)
    err = np.abs(np.einsum("rk,rkd->rd", weights, comps) - x).max(axis=1)
    for r in np.flatnonzero((err > tol * np.maximum(1.0, np.abs(x).max(axis=1))) | (total[:, 0] < 0.5)):
        lam, acts = _decompose_lp(x[r], space)
        weights[r] = 0
        comps[r] = 0
        weights[r, : lam.size] = lam
        comps[r, : lam.size] = acts
    return weights, comps


def sample_from_hull(x: np.ndarray, space: ActionSet, rng: np.random.Generator) -> np.ndarray:
    """An action per run whose expectation is ``x`` ``(n_runs, d)``: decompose, then draw a component."""
    weights, comps = decompose_batch(x, space)
    cum = np.cumsum(weights, axis=1)
    pick = (rng.random((x.shape[0], 1)) * cum[:, -1:] >= cum).sum(axis=1)
    pick = np.minimum(pick, weights.shape[1] - 1)
    return comps[np.arange(x.shape[0]), pick]


def _decompose_lp(x: np.ndarray, space: ActionSet) -> tuple[np.ndarray, np.ndarray]:
    """Fallback: a basic solution of ``[A^T; 1^T] lambda = [x; 1]``, ``lambda >= 0`` over the enumerated set."""
    plans = space.plans()
    if plans is None:
        raise RuntimeError("decomposition failed and the action set is too large to enumerate")
    A = np.vstack([plans.T.astype(float), np.ones(len(plans))])
    res = linprog(np.zeros(len(plans)), A_eq=A, b_eq=np.concatenate([x, [1.0]]), bounds=(0, None), method="highs-ds")
    if res.status != 0:  # the point left the hull by rounding: take the least-squares fit
        from scipy.optimize import nnls

        lam, _ = nnls(np.vstack([A[:-1], 1e3 * A[-1:]]), np.concatenate([x, [1e3]]))
    else:
        lam = res.x
    keep = lam > 1e-12
    return lam[keep] / lam[keep].sum(), plans[keep]


def systematic_sample(z: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Select items with marginals ``z`` ``(n_runs, k)`` in [0, 1], exactly ``round(sum z)`` of them per run.

    Systematic sampling: with ``C_k`` the running sum and one ``U ~ U[0, 1)`` per run, item ``k``
    is selected iff an integer ``j`` has ``C_{k-1} <= j + U < C_k``; ``P(select k) = z_k``. The
    running sum is rescaled to end exactly on the integer total, so rounding never changes the count.

    >>> systematic_sample(np.array([[0.5, 0.5, 1.0, 0.0]]), np.random.default_rng(0)).tolist()
    [[0, 1, 1, 0]]
    """
    total = z.sum(axis=1, keepdims=True)
    target = np.round(total)
    c = np.cumsum(z, axis=1) * np.where(total > 0, target / np.where(total > 0, total, 1), 0)
    c[:, -1:] = target
    c_prev = np.concatenate([np.zeros((z.shape[0], 1)), c[:, :-1]], axis=1)
    u = rng.random((z.shape[0], 1))
    return (np.floor(c - u) - np.floor(c_prev - u) > 0.5).astype(np.int64)


def round_two_demanders(x: np.ndarray, supply, rng: np.random.Generator) -> np.ndarray:
    """An integer plan per run with expectation ``x`` ``(n_runs, n_sup * 2)`` (two demanders, any supplies).

    A plan is fixed by its first column; round ``x_x1`` down and send one more unit on the edges
    picked by :func:`systematic_sample` on the fractional parts: the column sum stays exact, every
    entry stays between ``floor`` and ``ceil`` of ``x`` (so within the plan's bounds), and
    ``E[a] = x``. The outcomes, as ``U`` sweeps [0, 1), are at most ``n_sup + 1`` plans: a convex
    decomposition of ``x`` into feasible actions, drawn from in ``O(d)``.
    """
    first = x[:, 0::2]
    base = np.floor(first + 1e-12)
    frac = np.clip(first - base, 0.0, 1.0)
    col = base.astype(np.int64) + systematic_sample(frac, rng)
    plan = np.empty(x.shape, dtype=np.int64)
    plan[:, 0::2] = col
    plan[:, 1::2] = np.asarray(supply, dtype=np.int64)[None, :] - col
    return plan
