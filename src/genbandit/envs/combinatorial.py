"""Multi-play combinatorial semi-bandit environments of the MP-CSB paper (Nakamura, Kuroki & Chen, 2025).

Feedback is the semi-bandit sample array of :mod:`genbandit.policies.combinatorial`:
``(n_runs, n_arms, n_max)``, the ``j``-th unit on arm ``i`` at ``[r, i, j]`` for ``j < a_i``,
zeros elsewhere. All ``n_i`` samples of a round are drawn before the action is seen (the
player observes the first ``a_i``). ``regret`` is the pseudo-regret ``(a - a*) . mu_t`` with
``mu_t`` the round's true mean vector and ``a*`` the best fixed action for the whole horizon
(losses; the sign flips for rewards), so it can be negative before a switch.
"""

from __future__ import annotations

import functools
from numbers import Integral, Real

import numpy as np

from ..core.base import Environment, Step
from ..core.registry import register_environment
from ..core.validation import ArrayOf, Interval, InvalidInputError, InvalidParameterError, Options
from ..oracles.action_sets import ActionSet, KnapsackActions, TransportActions

__all__ = ["TransportSemiBandit", "KnapsackSemiBandit", "flip_schedule"]


def flip_schedule(regime: str, horizon: int, switch_round: int = 2000, first_block: int = 10, growth: float = 1.6) -> np.ndarray:
    """Whether round ``t = 1..horizon`` uses the flipped means ``1 - c`` ``(horizon,)`` bool.

    ``"stochastic"``: never. ``"corrupted"``: after ``switch_round`` (the paper's Section 5).
    ``"adversarial"``: blocks of lengths ``first_block * growth^k`` alternate between ``c`` and
    ``1 - c`` (stochastically constrained adversary, Zimmert & Seldin 2021).

    >>> flip_schedule("adversarial", 12, first_block=2, growth=2.0).astype(int).tolist()
    [0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    """
    t = np.arange(1, horizon + 1)
    if regime == "stochastic":
        return np.zeros(horizon, dtype=bool)
    if regime == "corrupted":
        return t > switch_round
    out = np.zeros(horizon, dtype=bool)
    start, length, flipped = 0, float(first_block), False
    while start < horizon:
        stop = min(horizon, start + max(1, int(round(length))))
        out[start:stop] = flipped
        start, length, flipped = stop, length * growth, not flipped
    return out


class _AllocationEnvironment(Environment):
    """What both MP-CSB environments share: the action set, its checks and random feasible actions."""

    action_kind = "allocation"
    space: ActionSet

    @property
    def action_set(self) -> dict:
        """The action set as a policy takes it (``{"kind": "transport", ...}``)."""
        return self.space.spec()

    def policy_arguments(self) -> dict:
        """Constructor arguments a policy may take from this environment: its ``action_set``."""
        return {"action_set": self.action_set}

    def sample_actions(self, rng: np.random.Generator, n_runs: int) -> np.ndarray:
        """Random feasible allocations ``(n_runs, n_arms)`` (uniform over the set when it can be listed)."""
        plans = self.space.plans()
        if plans is not None:
            return plans[rng.integers(len(plans), size=n_runs)]
        return self.space.best(rng.random((n_runs, self.space.n_arms)))

    def _check_actions(self, actions: np.ndarray) -> np.ndarray:
        acts = super()._check_actions(actions)
        if not self.space.contains(acts).all():
            raise InvalidInputError(f"{type(self).__name__}.step needs allocations in {self.action_set}. Got {acts.tolist()} instead.")
        return acts


@register_environment("transport-semi-bandit", "mp-csb-transport")
class TransportSemiBandit(_AllocationEnvironment):
    """Optimal-transport MP-CSB (MP-CSB paper, Section 5 and eq. 3): trucks from suppliers to demanders.

    Arm ``(x, y)`` (index ``x * n_dem + y``) has mean cost ``c_xy``; a truck on it reports a
    sample ``~ U(0, 2 c_xy)`` in normal rounds and ``~ U(1 - 2 c_xy, 1)`` (mean ``1 - c_xy``) in
    flipped rounds (see :func:`flip_schedule`). ``costs`` fixes ``c``; otherwise ``c`` is drawn
    from ``U[cost_range]`` with ``numpy.random.default_rng(cost_seed)`` (the same for every run),
    or per run from the environment's stream when ``cost_seed`` is ``None``.

    >>> env = TransportSemiBandit(supply=[1, 4, 5], demand=[4, 6], costs=[[0.35, 0.21], [0.12, 0.11], [0.43, 0.47]], seed=0)
    >>> env.reset().n_arms, env.action_set["kind"], env.n_max
    (6, 'transport', 5)
    >>> step = env.step(np.array([[0, 1, 4, 0, 0, 5]]))
    >>> round(float(step.regret[0]), 2), step.feedback.shape  # 0.48 + 2.35 - (0.44 + 1.72 + 0.47)
    (0.2, (1, 6, 5))
    """

    name = "transport-semi-bandit"
    _parameter_constraints = {
        "supply": [ArrayOf(Interval(Integral, 1, None, "left"))],
        "demand": [ArrayOf(Interval(Integral, 1, None, "left"))],
        "costs": [None, list, np.ndarray],
        "cost_range": [tuple, list],
        "cost_seed": [None, Interval(Integral, 0, None, "left")],
        "regime": [Options(("stochastic", "corrupted", "adversarial"))],
        "horizon": [Interval(Integral, 1, None, "left")],
        "switch_round": [Interval(Integral, 0, None, "left")],
        "first_block": [Interval(Integral, 1, None, "left")],
        "growth": [Interval(Real, 1, None, "left")],
    }

    def __init__(
        self,
        supply,
        demand,
        costs=None,
        cost_range=(0.1, 0.5),
        cost_seed=None,
        regime: str = "stochastic",
        horizon: int = 10000,
        switch_round: int = 2000,
        first_block: int = 10,
        growth: float = 1.6,
        seed=None,
    ) -> None:
        self.supply = supply
        self.demand = demand
        self.costs = costs
        self.cost_range = cost_range
        self.cost_seed = cost_seed
        self.regime = regime
        self.horizon = horizon
        self.switch_round = switch_round
        self.first_block = first_block
        self.growth = growth
        self.seed = seed

    def _check_params(self) -> None:
        space = TransportActions(self.supply, self.demand)
        lo, hi = (float(v) for v in self.cost_range)
        if not 0 <= lo <= hi <= 0.5:
            raise InvalidParameterError(f"The 'cost_range' parameter of TransportSemiBandit must lie in [0, 0.5]. Got {self.cost_range!r}.")
        if self.costs is not None:
            c = np.asarray(self.costs, dtype=float)
            if c.shape != (len(self.supply), len(self.demand)) or np.any(c < 0) or np.any(c > 0.5):
                raise InvalidParameterError(f"The 'costs' parameter of TransportSemiBandit must be a {space.supply.size}x{space.demand.size} matrix in [0, 0.5].")

    @functools.cached_property
    def space(self) -> TransportActions:
        return TransportActions(self.supply, self.demand)

    @property
    def n_arms(self) -> int:
        return len(self.supply) * len(self.demand)

    @property
    def n_max(self) -> int:
        return int(min(max(self.supply), max(self.demand)))

    @property
    def max_horizon(self) -> int | None:  # type: ignore[override]
        return None if self.regime == "stochastic" else int(self.horizon)

    def _init_state(self, n_runs: int) -> None:
        space = self.space
        lo, hi = (float(v) for v in self.cost_range)
        if self.costs is not None:
            c = np.tile(np.asarray(self.costs, dtype=float).ravel(), (n_runs, 1))
        elif self.cost_seed is not None:
            c = np.tile(np.random.default_rng(self.cost_seed).uniform(lo, hi, space.n_arms), (n_runs, 1))
        else:
            c = self._rng.uniform(lo, hi, (n_runs, space.n_arms))
        self._c = c
        self._caps = space.caps
        self._flips = flip_schedule(self.regime, int(self.horizon), self.switch_round, self.first_block, self.growth)
        flipped = int(self._flips.sum())
        total_mean = (self._flips.size - flipped) * c + flipped * (1 - c)
        self._best = space.best(total_mean)

    def _step(self, actions: np.ndarray) -> Step:
        flipped = bool(self._flips[self._t]) if self._t < self._flips.size else False
        c = self._c
        mean = 1 - c if flipped else c
        draws = 2 * c[:, :, None] * self._rng.random((c.shape[0], c.shape[1], self.n_max))
        samples = 1 - draws if flipped else draws
        observed = np.arange(self.n_max)[None, None, :] < actions[:, :, None]
        feedback = np.where(observed, samples, 0.0)
        regret = ((actions - self._best) * mean).sum(axis=1)
        optimal = np.all(actions == self._best, axis=1).astype(float)
        return Step(feedback=feedback, reward=-feedback.sum(axis=(1, 2)), regret=regret, info={"optimal": optimal})

    @classmethod
    def _check_examples(cls) -> list[Environment]:
        return [
            cls(supply=[1, 2, 2], demand=[2, 3], costs=[[0.3, 0.2], [0.1, 0.4], [0.45, 0.25]], horizon=50, seed=1),
            cls(supply=[2, 3], demand=[1, 2, 2], regime="corrupted", switch_round=20, horizon=50, seed=2),
        ]


@register_environment("knapsack-semi-bandit", "mp-csb-knapsack")
class KnapsackSemiBandit(_AllocationEnvironment):
    """Online-advertising knapsack MP-CSB (MP-CSB paper, Section 1.4): copies of items in a frame of size W.

    Item ``i`` (weight ``w_i``) may be placed up to ``n_i = W // w_i`` times; each copy returns a
    Bernoulli(``means_i``) reward. Rewards are maximised; regret is ``(a* - a) . means``.

    >>> env = KnapsackSemiBandit(weights=[2, 3, 4, 5, 7], capacity=20, means=[0.10, 0.17, 0.26, 0.30, 0.45], seed=0)
    >>> env.reset()._best.tolist()
    [[0, 0, 5, 0, 0]]
    >>> round(float(env.step(np.array([[0, 0, 0, 4, 0]])).regret[0]), 2)
    0.1
    """

    name = "knapsack-semi-bandit"
    _parameter_constraints = {
        "weights": [ArrayOf(Interval(Integral, 1, None, "left"))],
        "capacity": [Interval(Integral, 1, None, "left")],
        "means": [ArrayOf(Interval(Real, 0, 1, "both"))],
    }

    def __init__(self, weights, capacity: int, means, seed=None) -> None:
        self.weights = weights
        self.capacity = capacity
        self.means = means
        self.seed = seed

    def _check_params(self) -> None:
        if len(self.means) != len(self.weights):
            raise InvalidParameterError("The 'means' parameter of KnapsackSemiBandit needs one value per weight.")

    @functools.cached_property
    def space(self) -> KnapsackActions:
        return KnapsackActions(self.weights, self.capacity)

    @property
    def n_arms(self) -> int:
        return len(self.weights)

    @property
    def n_max(self) -> int:
        return int(self.space.caps.max())

    def _init_state(self, n_runs: int) -> None:
        self._mu = np.asarray(self.means, dtype=float)
        self._best = self.space.best(np.tile(self._mu, (n_runs, 1)))

    def _step(self, actions: np.ndarray) -> Step:
        n_runs = actions.shape[0]
        samples = (self._rng.random((n_runs, self.n_arms, self.n_max)) < self._mu[None, :, None]).astype(float)
        observed = np.arange(self.n_max)[None, None, :] < actions[:, :, None]
        feedback = np.where(observed, samples, 0.0)
        regret = ((self._best - actions) * self._mu).sum(axis=1)
        optimal = np.all(actions == self._best, axis=1).astype(float)
        return Step(feedback=feedback, reward=feedback.sum(axis=(1, 2)), regret=regret, info={"optimal": optimal})

    @classmethod
    def _check_examples(cls) -> list[Environment]:
        return [cls(weights=[2, 3, 5], capacity=7, means=[0.2, 0.5, 0.6], seed=2)]
