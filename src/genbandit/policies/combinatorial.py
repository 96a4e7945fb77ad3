"""Multi-play combinatorial semi-bandits (Nakamura, Kuroki & Chen, 2025, "MP-CSB").

Every round a policy chooses an integer allocation ``a`` in an action set (transport plans,
knapsack fillings; see :mod:`genbandit.oracles`) and observes one sample for every unit placed.

Actions are ``(n_runs, n_arms)`` int64 allocations (``action_kind = "allocation"``).

**Semi-bandit feedback format.** ``feedback`` is a float array ``(n_runs, n_arms, n_max)`` with
``n_max = max_i n_i`` (the largest per-arm cap of the action set): ``feedback[r, i, j]`` is the
sample of the ``j``-th unit placed on arm ``i`` in run ``r`` for ``j < a_i``; entries
``j >= a_i`` are ignored (pad them with 0). Every entry must be finite and in [0, 1]: losses
for transport (minimised), rewards for knapsack (maximised). For one run (``update``) drop the
leading axis; :func:`pack_samples` builds the array from a list of per-arm sample lists.

Policies take the action set as a hyperparameter (a dict, see
:func:`genbandit.oracles.make_action_set`), usually handed over by the environment
(``env.action_set``). The duplicated baselines (``CTS-dup``, ``LBINFV-dup``) learn on the
binary instance of the duplicating technique but play and are fed exactly like the others: the
allocation they play is the aggregate of their binary action, and the samples of arm ``i`` go to
its used copies in order.
"""

from __future__ import annotations

import functools
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np

from ..core.base import Environment, Policy
from ..core.registry import ENVIRONMENTS, register_policy
from ..core.validation import Interval, InvalidInputError, InvalidParameterError, Options, check_finite_array
from ..oracles.action_sets import ActionSet, TransportActions, make_action_set, round_two_demanders, sample_from_hull

__all__ = ["GenCTS", "GenLBINFV", "CTSDup", "LBINFVDup", "CUCB", "pack_samples", "hybrid_regularizer"]

_BIG = 1e6  # index of an arm never sampled (CUCB): forces exploration without inf * 0


def pack_samples(action, samples, n_max: int) -> np.ndarray:
    """The ``(n_arms, n_max)`` feedback array of one run from per-arm sample lists.

    >>> pack_samples([2, 0, 1], [[0.1, 0.3], [], [0.5]], n_max=2).tolist()
    [[0.1, 0.3], [0.0, 0.0], [0.5, 0.0]]
    """
    a = np.asarray(action, dtype=np.int64)
    out = np.zeros((a.size, int(n_max)))
    for i, s in enumerate(samples):
        s = np.asarray(s, dtype=float)
        if s.size != a[i]:
            raise InvalidInputError(f"Arm {i} was given {a[i]} units but {s.size} samples.")
        out[i, : s.size] = s
    return out


class _MultiPlay(Policy):
    """Shared plumbing: the action set, feedback checks and the map to the duplicated instance."""

    action_kind = "allocation"
    duplicated: ClassVar[bool] = False
    _parameter_constraints = {"action_set": [dict]}

    action_set: dict

    @functools.cached_property
    def space(self) -> ActionSet:
        """The action set the policy plays in."""
        return make_action_set(self.action_set)

    @functools.cached_property
    def learning_space(self) -> ActionSet:
        """The set the statistics live on: the duplicated binary set for ``-dup`` baselines."""
        return self.space.duplicate() if self.duplicated else self.space

    @functools.cached_property
    def owner_matrix(self) -> np.ndarray:
        owner = self.learning_space.owner
        return np.eye(self.space.n_arms, dtype=np.int64)[owner]

    def _check_params(self) -> None:
        if self.space.n_arms != self.n_arms:
            raise InvalidParameterError(
                f"The 'n_arms' parameter of {type(self).__name__} must match the action set ({self.space.n_arms} arms). Got {self.n_arms}."
            )

    @property
    def n_max(self) -> int:
        """Length of the sample axis of the feedback: the largest per-arm cap."""
        return int(self.space.caps.max())

    # ------------------------------------------------------------- validation
    def _check_actions(self, actions: np.ndarray) -> np.ndarray:
        acts = super()._check_actions(actions)
        if not self.space.contains(acts).all():
            raise InvalidInputError(f"The allocation given to {type(self).__name__} is not in its action set. Got {acts.tolist()} instead.")
        return acts

    def _check_feedback(self, feedback: Any, actions: np.ndarray) -> np.ndarray:
        owner = type(self).__name__
        fb = check_finite_array("semi-bandit feedback", feedback, (self._n_runs, self.n_arms, self.n_max), owner)
        if np.any((fb < 0) | (fb > 1)):
            raise InvalidInputError(f"The semi-bandit samples of {owner} must lie in [0, 1]. Got {fb.tolist()} instead.")
        return fb

    # ------------------------------------------------------------- plumbing
    def _play(self, learned: np.ndarray) -> np.ndarray:
        """The allocation to play for a learning-space action; remembers it for the update."""
        if not self.duplicated:
            return learned
        self._pending = learned.astype(np.int64)
        return learned @ self.owner_matrix

    def _units(self, actions: np.ndarray, feedback: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(units (n_runs, d_learn), samples (n_runs, d_learn, k))`` on the learning space, unobserved zeroed."""
        if not self.duplicated:
            mask = np.arange(feedback.shape[2])[None, None, :] < actions[:, :, None]
            return actions, np.where(mask, feedback, 0.0)
        pending = getattr(self, "_pending", None)
        if pending is not None and pending.shape[0] == actions.shape[0] and np.array_equal(pending @ self.owner_matrix, actions):
            z = pending
        else:
            z = self.space.expand(actions)
        owner = self.learning_space.owner
        order = np.argsort(owner, kind="stable")
        zs = z[:, order]
        before = np.cumsum(zs, axis=1) - zs
        first = np.searchsorted(owner[order], owner[order])
        rank_sorted = before - before[:, first]
        rank = np.empty_like(rank_sorted)
        rank[:, order] = rank_sorted
        rows = np.arange(z.shape[0])[:, None]
        picked = feedback[rows, owner[None, :], np.minimum(rank, feedback.shape[2] - 1)]
        return z, np.where(z > 0, picked, 0.0)[:, :, None]

    @classmethod
    def _check_examples(cls) -> list[tuple[Policy, Environment]]:
        KnapsackSemiBandit, TransportSemiBandit = ENVIRONMENTS.get("KnapsackSemiBandit"), ENVIRONMENTS.get("TransportSemiBandit")

        env = TransportSemiBandit(supply=[1, 2, 2], demand=[2, 3], costs=[[0.3, 0.2], [0.1, 0.4], [0.45, 0.25]], horizon=50, seed=1)
        pairs: list[tuple[Policy, Environment]] = [(cls(n_arms=env.n_arms, action_set=env.action_set, **cls._example_params()), env)]
        if cls.supports_knapsack:
            knap = KnapsackSemiBandit(weights=[2, 3, 5], capacity=7, means=[0.2, 0.5, 0.6], seed=2)
            pairs.append((cls(n_arms=knap.n_arms, action_set=knap.action_set, **cls._example_params()), knap))
        return pairs

    supports_knapsack: ClassVar[bool] = True

    @classmethod
    def _example_params(cls) -> dict:
        return {"seed": 0}


# ----------------------------------------------------------------------------- Thompson sampling
@register_policy("gencts")
class GenCTS(_MultiPlay):
    """GenCTS, generalized combinatorial Thompson sampling (MP-CSB paper, Algorithms 1 and 2).

    One Beta posterior per arm. Each round: ``theta_i ~ Beta(p_i, q_i)``, play
    ``Oracle(theta)``; Update flips one Bernoulli(L) coin per observed sample ``L`` (the Bernoulli
    trick) and adds it to ``p_i`` (a 1) or ``q_i`` (a 0), so the posterior counts samples, not
    rounds: ``p_i + q_i - 2 = sum_s a_i(s)``. On knapsack action sets samples are rewards and the
    oracle maximises.

    >>> from genbandit.envs.combinatorial import TransportSemiBandit
    >>> env = TransportSemiBandit(supply=[1, 4, 5], demand=[4, 6], costs=[[0.35, 0.21], [0.12, 0.11], [0.43, 0.47]], seed=0)
    >>> policy = GenCTS(n_arms=6, action_set=env.action_set, seed=0)
    >>> _ = env.reset(); _ = policy.reset()
    >>> for _ in range(300):
    ...     a = policy.select(); _ = policy.update(a, env.step(a[None]).feedback[0])
    >>> policy.select().tolist()  # the optimal plan
    [0, 1, 0, 4, 4, 1]
    >>> int(policy._p.sum() + policy._q.sum() - 12)  # every sample counted: 10 units x 300 rounds
    3000
    """

    name = "GenCTS"

    def __init__(self, n_arms: int, action_set: dict, seed=None) -> None:
        self.n_arms = n_arms
        self.action_set = action_set
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        d = self.learning_space.n_arms
        self._pending = None
        self._p = np.ones((n_runs, d))
        self._q = np.ones((n_runs, d))

    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        theta = self._rng.beta(self._p, self._q)
        return self._play(self.learning_space.best(theta))

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray | None) -> None:
        units, samples = self._units(actions, feedback)
        observed = np.arange(samples.shape[2])[None, None, :] < units[:, :, None]
        ones = ((self._rng.random(samples.shape) < samples) & observed).sum(axis=2)
        self._p += ones
        self._q += units - ones


@register_policy("cts-dup", "ctsdup")
class CTSDup(GenCTS):
    """CTS (Wang & Chen, 2018) on the duplicated binary instance: the MP-CSB paper's TS baseline (Section 5).

    Every unit that can be placed becomes its own binary arm with its own Beta posterior
    (transport: one arm per truck and demander, ``b_xy = u_x``; knapsack: one per copy).

    >>> policy = CTSDup(n_arms=6, action_set={"kind": "transport", "supply": [1, 4, 5], "demand": [4, 6]}, seed=0)
    >>> policy.learning_space.n_arms, int(policy.select().sum())
    (20, 10)
    """

    name = "CTS-dup"
    duplicated = True


@register_policy("cucb")
class CUCB(_MultiPlay):
    """CUCB (Chen, Wang & Yuan, 2013) with multi-play sample counts: an addition, not run in the MP-CSB paper.

    Index ``mean_i -/+ sqrt(1.5 ln t / N_i)`` (lower confidence bound for losses, upper for
    rewards) with ``N_i`` the number of samples of arm ``i``; arms never sampled come first.

    >>> policy = CUCB(n_arms=6, action_set={"kind": "transport", "supply": [1, 4, 5], "demand": [4, 6]}, seed=0)
    >>> policy.select().tolist()
    [0, 1, 0, 4, 4, 1]
    """

    name = "CUCB"
    _parameter_constraints = {"exploration": [Interval(Real, 0, None, "left")]}

    def __init__(self, n_arms: int, action_set: dict, exploration: float = 1.5, seed=None) -> None:
        self.n_arms = n_arms
        self.action_set = action_set
        self.exploration = exploration
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        self._sums = np.zeros((n_runs, self.n_arms))
        self._counts = np.zeros((n_runs, self.n_arms))

    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        sign = -1.0 if self.space.sense == "min" else 1.0
        n = np.maximum(self._counts, 1)
        bonus = np.sqrt(self.exploration * np.log(self._t + 1) / n)
        index = np.where(self._counts > 0, self._sums / n + sign * bonus, sign * _BIG)
        return self.space.best(index)

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray | None) -> None:
        units, samples = self._units(actions, feedback)
        self._sums += samples.sum(axis=2)
        self._counts += units


# ----------------------------------------------------------------------------- best of both worlds
def hybrid_regularizer(x, n, gamma: float, order: int = 0) -> np.ndarray:
    """``phi_i(x) = n_i phi(x / n_i)`` with ``phi(u) = u - 1 - log u + gamma (u + (1 - u) log(1 - u))`` (corrected eq. 9).

    ``order`` 0, 1 or 2 gives the function or its first or second derivative:
    ``phi_i' = 1 - n_i / x - gamma log(1 - x / n_i)``, ``phi_i'' = n_i / x^2 + gamma / (n_i - x)``.

    >>> float(hybrid_regularizer(4.0, 4.0, gamma=2.0))  # phi_i(n_i) = n_i gamma
    8.0
    """
    x = np.asarray(x, dtype=float)
    u = x / n
    if order == 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            ent = np.where(u < 1, (1 - u) * np.log1p(-np.minimum(u, 1 - 1e-300)), 0.0)
        return n * (u - 1 - np.log(u) + gamma * (u + ent))
    if order == 1:
        return 1 - 1 / u - gamma * np.log1p(-u)
    return 1 / (n * u * u) + gamma / (n * (1 - u))


def newton_ftrl(c: np.ndarray, beta: np.ndarray, x0: np.ndarray, n: np.ndarray, A: np.ndarray, gamma: float, tol: float = 1e-20) -> np.ndarray:
    """``argmin_{A x = A x0} <c, x> + sum_i beta_i phi_i(x_i)`` for every run by damped Newton (the FTRL step of GenLBINFV, Algorithm 3).

    ``c``, ``beta``, ``x0`` ``(n_runs, d)``; ``x0`` strictly inside ``(0, n)`` and feasible.
    The barrier keeps ``x > 0`` and the entropy term ``x < n``; steps keep 1% of the distance
    to the boundary and backtrack (Armijo) while the Newton decrement is large. A run stops when
    its squared decrement falls under ``tol`` or after three more steps once it is under 1e-10
    (quadratic convergence: rounding, not the iterate, limits it then).
    """
    x = x0.copy()
    extra = np.zeros(x.shape[0], dtype=np.int64)
    for _ in range(100):
        g = c + beta * hybrid_regularizer(x, n, gamma, 1)
        h = beta * hybrid_regularizer(x, n, gamma, 2)
        hinv = 1.0 / h
        AH = A[None, :, :] * hinv[:, None, :]
        M = AH @ A.T
        rhs = -(AH @ g[:, :, None])
        w = np.linalg.solve(M, rhs)[:, :, 0]
        dx = -(g + w @ A) * hinv
        lam2 = (dx * dx * h).sum(axis=1)
        extra += lam2 < 1e-10
        active = (lam2 > tol) & (extra <= 3)
        if not active.any():
            break
        with np.errstate(divide="ignore"):
            to_low = np.where(dx < 0, x / -dx, np.inf).min(axis=1)
            to_high = np.where(dx > 0, (n - x) / dx, np.inf).min(axis=1)
        s = np.minimum(1.0, 0.99 * np.minimum(to_low, to_high))
        damped = active & (lam2 > 1e-2)
        if damped.any():
            f0 = _ftrl_objective(x, c, beta, n, gamma)
            for _ in range(60):
                trial = x + s[:, None] * dx
                bad = damped & (_ftrl_objective(trial, c, beta, n, gamma) > f0 - 0.25 * s * lam2)
                if not bad.any():
                    break
                s = np.where(bad, s / 2, s)
        x = np.where(active[:, None], x + s[:, None] * dx, x)
    return x


def _ftrl_objective(x, c, beta, n, gamma) -> np.ndarray:
    return (c * x).sum(axis=1) + (beta * hybrid_regularizer(x, n, gamma, 0)).sum(axis=1)


@register_policy("genlbinfv")
class GenLBINFV(_MultiPlay):
    """GenLBINFV, best-of-both-worlds optimistic FTRL (MP-CSB paper, Algorithm 3, eqs. 4-10).

    Each round: prediction ``q`` (LS, eq. 87: ``(1/2 + sum of samples) / (1 + number of
    samples)``; or GD, eq. 8, step ``eta``), FTRL point
    ``x = argmin_{conv(A)} <q + sum_s lhat(s), x> + sum_i beta_i phi_i(x_i)`` (Newton's method),
    an allocation sampled with mean ``x`` (``sampler="decomposition"``: face-walking Caratheodory
    decomposition, any transport set; ``"rounding"``, the default, used with two demanders:
    systematic rounding of the first column, also a decomposition into at most ``d + 1`` plans,
    in ``O(d)``), then the estimator ``lhat_i = q_i + a_i (k_i - q_i) / x_i`` and the
    learning rates ``beta_i^2 += alpha_i / gamma`` (eqs. 10, 39), ``gamma = log T``.
    ``epsilon`` is ``eps_i / n_i`` (so ``beta_i(1) = 1 + epsilon``). Transport action sets only:
    its convex hull is the transportation polytope, ``{x >= 0 : A x = b}``.

    >>> from genbandit.envs.combinatorial import TransportSemiBandit
    >>> env = TransportSemiBandit(supply=[1, 4, 5], demand=[4, 6], costs=[[0.35, 0.21], [0.12, 0.11], [0.43, 0.47]], seed=0)
    >>> policy = GenLBINFV(n_arms=6, action_set=env.action_set, horizon=1000, seed=0)
    >>> _ = env.reset(); _ = policy.reset()
    >>> for _ in range(1000):
    ...     a = policy.select(); _ = policy.update(a, env.step(a[None]).feedback[0])
    >>> np.round(policy._x[0]).astype(int).tolist()  # the FTRL point has moved next to the optimal plan
    [0, 1, 0, 4, 4, 1]
    """

    name = "GenLBINFV"
    supports_knapsack = False
    _parameter_constraints = {
        "horizon": [Interval(Integral, 2, None, "left")],
        "epsilon": [Interval(Real, 0, 0.5, "right")],
        "mode": [Options(("LS", "GD"))],
        "eta": [Interval(Real, 0, 0.5, "neither")],
        "sampler": [Options(("rounding", "decomposition"))],
    }

    def __init__(
        self,
        n_arms: int,
        action_set: dict,
        horizon: int,
        epsilon: float = 0.2,
        mode: str = "LS",
        eta: float = 0.25,
        sampler: str = "rounding",
        seed=None,
    ) -> None:
        self.n_arms = n_arms
        self.action_set = action_set
        self.horizon = horizon
        self.epsilon = epsilon
        self.mode = mode
        self.eta = eta
        self.sampler = sampler
        self.seed = seed

    def _check_params(self) -> None:
        super()._check_params()
        space = self.learning_space
        if not isinstance(space, TransportActions) or space.demand.size < 2 or space.supply.size < 2:
            raise InvalidParameterError(
                f"{type(self).__name__} needs a transport action set with 2+ suppliers and demanders "
                "(an FTRL step over the convex hull with an interior point). Got "
                f"{self.action_set!r}."
            )

    @property
    def gamma(self) -> float:
        return float(np.log(self.horizon))

    @property
    def two_demanders(self) -> bool:
        return self.learning_space.demand.size == 2

    def _init_state(self, n_runs: int) -> None:
        space = self.learning_space
        d = space.n_arms
        self._pending = None
        self._lhat = np.zeros((n_runs, d))
        self._sums = np.zeros((n_runs, d))
        self._counts = np.zeros((n_runs, d))
        self._q_gd = np.full((n_runs, d), 0.5)
        self._beta2 = np.full((n_runs, d), (1 + self.epsilon) ** 2)
        self._x = np.tile(space.interior_point(), (n_runs, 1))
        self._q = np.full((n_runs, d), 0.5)

    def _prediction(self) -> np.ndarray:
        if self.mode == "LS":
            return (0.5 + self._sums) / (1 + self._counts)
        return self._q_gd

    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        space = self.learning_space
        q = self._prediction()
        n = space.caps.astype(float)
        self._x = newton_ftrl(q + self._lhat, np.sqrt(self._beta2), self._x, n, space.A, self.gamma)
        self._q = q
        if self.sampler == "rounding" and self.two_demanders:
            z = round_two_demanders(self._x, self.learning_space.supply, self._rng)
        else:
            z = sample_from_hull(self._x, space, self._rng)
        return self._play(z)

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray | None) -> None:
        a, samples = self._units(actions, feedback)
        x, q = self._x, self._q
        n = self.learning_space.caps.astype(float)
        total = samples.sum(axis=2)
        played = a >= 1
        k = total / np.maximum(a, 1)
        self._lhat += q + np.where(played, (total - a * q) / x, 0.0)
        u = x / n
        alpha = np.where(played, (a / n) ** 2 * (k - q) ** 2 * np.minimum(1.0, 2 * (1 - u) / (u * u * self.gamma)), 0.0)
        self._beta2 += alpha / self.gamma
        self._sums += total
        self._counts += a
        if self.mode == "GD":
            self._q_gd = np.where(played, (1 - self.eta) * self._q_gd + self.eta * k, self._q_gd)

    @classmethod
    def _example_params(cls) -> dict:
        return {"horizon": 50, "seed": 0}


@register_policy("lbinfv-dup", "lbinfvdup")
class LBINFVDup(GenLBINFV):
    """LBINFV (Tsuchiya, Ito & Honda, 2023) on the duplicated binary instance: the MP-CSB paper's BOBW baseline.

    GenLBINFV with every cap ``n_i = 1``: one FTRL coordinate per truck and demander.

    >>> policy = LBINFVDup(n_arms=6, action_set={"kind": "transport", "supply": [1, 4, 5], "demand": [4, 6]}, horizon=100, seed=0)
    >>> policy.learning_space.n_arms, int(policy.select().sum())
    (20, 10)
    """

    name = "LBINFV-dup"
    duplicated = True
