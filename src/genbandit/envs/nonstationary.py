"""Environments whose best arm moves: an oblivious adversarial table and piecewise-stationary arms."""

from __future__ import annotations

import abc
import functools
from numbers import Integral, Real

import numpy as np

from ..core.base import Environment, Step
from ..core.registry import register_environment
from ..core.validation import ArrayOf, Interval, InvalidParameterError, check_finite_array

__all__ = ["AdversarialTable", "SwitchingArms", "UCB1TrapTable", "PiecewiseStationary"]


class _RewardTable(Environment):
    """Plays a reward table ``(horizon, n_arms)`` fixed before play (an oblivious adversary).

    Regret is measured against the best fixed arm in hindsight over the whole table, so the
    final cumulative regret is ``max_i sum_t r[t, i] - sum_t r[t, a_t]`` (it can be negative
    before the end, and for policies that track the switches).
    """

    @abc.abstractmethod
    def _build_table(self) -> np.ndarray:
        """The reward table ``(horizon, n_arms)``."""

    @functools.cached_property
    def table(self) -> np.ndarray:
        return self._build_table()

    @property
    def max_horizon(self) -> int:
        return int(self.table.shape[0])

    def _init_state(self, n_runs: int) -> None:
        self._comparator = int(self.table.sum(axis=0).argmax())

    def mean_rewards(self) -> np.ndarray:
        return np.broadcast_to(self.table[min(self._t, self.max_horizon - 1)], (self.n_runs, self.n_arms))

    def _step(self, actions: np.ndarray) -> Step:
        row = self.table[self._t]
        reward = row[actions]
        return Step(feedback=reward, reward=reward, regret=row[self._comparator] - reward, info={"optimal": (reward == row.max()).astype(float)})


@register_environment("adversarial")
class AdversarialTable(_RewardTable):
    """An oblivious adversary given as a reward table ``(horizon, n_arms)``.

    >>> from genbandit import AdversarialTable
    >>> env = AdversarialTable(rewards=[[1, 0], [1, 0], [0, 1]]).reset()
    >>> [float(env.step(np.array([a])).regret[0]) for a in (1, 0, 1)]
    [1.0, 0.0, -1.0]
    """

    name = "adversarial-table"
    _parameter_constraints = {"rewards": [np.ndarray, list]}

    def __init__(self, rewards, seed=None) -> None:
        self.rewards = rewards
        self.seed = seed

    def _check_params(self) -> None:
        try:
            table = check_finite_array("rewards", self.rewards, (None, None), "AdversarialTable")
        except ValueError as exc:
            raise InvalidParameterError(f"The 'rewards' parameter of AdversarialTable must be a finite 2-d table. {exc}") from exc
        if table.shape[0] == 0 or table.shape[1] == 0:
            raise InvalidParameterError("The 'rewards' parameter of AdversarialTable must have at least one round and one arm.")

    @property
    def n_arms(self) -> int:
        return int(self.table.shape[1])

    def _build_table(self) -> np.ndarray:
        return np.asarray(self.rewards, dtype=float)

    @classmethod
    def _check_examples(cls) -> list[Environment]:
        return [cls(rewards=np.random.default_rng(0).random((500, 3)))]


@register_environment("switching", "adversarial-switch")
class SwitchingArms(_RewardTable):
    """Bernoulli arms whose means cycle through ``means`` rows, one row per ``period`` rounds.

    ``means`` ``(n_phases, n_arms)`` lists each phase's means; phase ``j`` holds in rounds
    ``[j * period, (j + 1) * period)`` modulo the cycle. The Bernoulli draws are made once from
    ``table_seed`` when the table is built, before any play, so the adversary is oblivious.

    >>> from genbandit import SwitchingArms
    >>> SwitchingArms(horizon=6, period=2).table.tolist()
    [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]
    """

    name = "switching-arms"
    _parameter_constraints = {
        "horizon": [Interval(Integral, 1, None, "left")],
        "period": [Interval(Integral, 1, None, "left")],
        "means": [np.ndarray, list, tuple],
        "table_seed": [Interval(Integral, 0, None, "left")],
    }

    def __init__(self, horizon: int, period: int = 2000, means=((1.0, 0.0), (0.0, 1.0)), table_seed: int = 0, seed=None) -> None:
        self.horizon = horizon
        self.period = period
        self.means = means
        self.table_seed = table_seed
        self.seed = seed

    def _check_params(self) -> None:
        means = np.asarray(self.means, dtype=float)
        if means.ndim != 2 or means.shape[1] < 2 or not np.all((means >= 0) & (means <= 1)):
            raise InvalidParameterError(f"The 'means' parameter of SwitchingArms must be a (phases, arms >= 2) table of values in [0, 1]. Got {self.means!r} instead.")

    @property
    def n_arms(self) -> int:
        return int(np.shape(self.means)[1])

    def _build_table(self) -> np.ndarray:
        phases = np.asarray(self.means, dtype=float)
        phase = (np.arange(self.horizon) // self.period) % phases.shape[0]
        means = phases[phase]
        return (np.random.default_rng(self.table_seed).random(means.shape) < means).astype(float)

    @classmethod
    def _check_examples(cls) -> list[Environment]:
        return [cls(horizon=300, period=50, means=[[0.8, 0.2], [0.3, 0.6]])]


@register_environment("ucb1-trap", "anti-ucb1")
class UCB1TrapTable(_RewardTable):
    """An oblivious table built in advance against UCB1: the arm UCB1 will play gets 0, the others 1.

    Every deterministic bandit policy has linear worst-case regret against an oblivious adversary:
    simulate the policy before the game and give the arm it will choose reward 0 and every other
    arm reward 1; the policy then earns nothing while the best fixed arm earns at least
    ``(T - K)(1 - 1/K)`` (Lattimore & Szepesvari, *Bandit Algorithms*, 2020, sec. 11.1). This
    table applies that argument to UCB1 with genbandit's index, ``mean_i + sqrt(alpha ln t / n_i)``
    with ``t`` the rounds played so far (:class:`~genbandit.policies.classic.UCB1`), and is
    fixed when it is built, before any play:

    - rounds ``0..K-1`` (UCB1 tries every arm once, in an order drawn at random): arm ``i`` earns
      ``(K - 1 - i) / (K - 1)`` in each of them, so whatever the order each arm has been seen once
      with a distinct mean;
    - every later round: the table replays UCB1's index on the rewards UCB1 will have seen (its
      chosen arm has earned 0 since), gives the arm of the largest index reward 0, the others 1.

    UCB1 (with the same ``alpha``) therefore earns ``K / 2`` in the first ``K`` rounds and nothing
    after, and its regret against the best fixed arm grows linearly, about ``T (1 - 1/K)``. A randomised
    policy is not fooled: EXP3's expected regret against any oblivious table is at most
    ``2 sqrt(T K ln K)`` with its anytime learning rate (Bubeck & Cesa-Bianchi, 2012, Theorem 3.1).

    >>> from genbandit.envs.nonstationary import UCB1TrapTable
    >>> UCB1TrapTable(horizon=6).table.tolist()
    [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]
    """

    name = "ucb1-trap"
    _parameter_constraints = {
        "horizon": [Interval(Integral, 1, None, "left")],
        "n_arms": [Interval(Integral, 2, None, "left")],
        "alpha": [Interval(Real, 0, None, "neither")],
    }

    def __init__(self, horizon: int, n_arms: int = 2, alpha: float = 2.0, seed=None) -> None:
        self.horizon = horizon
        self.n_arms = n_arms
        self.alpha = alpha
        self.seed = seed

    def _build_table(self) -> np.ndarray:
        k = self.n_arms
        first = (k - 1 - np.arange(k)) / (k - 1)
        table = np.ones((self.horizon, k))
        table[: min(k, self.horizon)] = first
        counts = np.ones((1, k), dtype=np.int64)
        sums = first[None, :].copy()
        for t in range(k, self.horizon):
            # UCB1's index exactly as the policy computes it (same operations, same rounding)
            n = np.maximum(counts, 1)
            index = sums / np.maximum(counts, 1) + np.sqrt(self.alpha * np.log(max(t, 1)) / n)
            arm = int(index[0].argmax())
            table[t, arm] = 0.0
            counts[0, arm] += 1
        return table

    @classmethod
    def _check_examples(cls) -> list[Environment]:
        return [cls(horizon=300, n_arms=3)]


@register_environment("piecewise")
class PiecewiseStationary(Environment):
    """Bernoulli arms whose means jump at fixed change points; regret against the current best arm.

    ``means`` has one row per segment ``(n_segments, n_arms)``; segment ``j`` starts at round
    ``change_points[j - 1]`` (the first starts at round 0).

    >>> from genbandit import PiecewiseStationary
    >>> env = PiecewiseStationary(means=[[0.9, 0.1], [0.1, 0.9]], change_points=[2]).reset()
    >>> [float(env.step(np.array([0])).regret[0]) for _ in range(3)]
    [0.0, 0.0, 0.8]
    """

    name = "piecewise-stationary"
    _parameter_constraints = {"means": [np.ndarray, list], "change_points": [ArrayOf(Interval(Integral, 1, None, "left")), list]}

    def __init__(self, means, change_points, seed=None) -> None:
        self.means = means
        self.change_points = change_points
        self.seed = seed

    def _check_params(self) -> None:
        means = np.asarray(self.means, dtype=float)
        points = np.asarray(self.change_points, dtype=float)
        if means.ndim != 2 or not np.all((means >= 0) & (means <= 1)):
            raise InvalidParameterError(f"The 'means' parameter of PiecewiseStationary must be a 2-d table of values in [0, 1]. Got {self.means!r} instead.")
        if len(points) != means.shape[0] - 1 or np.any(np.diff(points) <= 0):
            raise InvalidParameterError(
                f"The 'change_points' parameter of PiecewiseStationary must be {means.shape[0] - 1} increasing rounds (one fewer than segments). Got {self.change_points!r} instead."
            )

    @property
    def n_arms(self) -> int:
        return int(np.shape(self.means)[1])

    def _init_state(self, n_runs: int) -> None:
        self._table = np.asarray(self.means, dtype=float)
        self._starts = np.asarray(self.change_points, dtype=np.int64)

    def _segment(self) -> int:
        return int(np.searchsorted(self._starts, self._t, side="right"))

    def mean_rewards(self) -> np.ndarray:
        return np.broadcast_to(self._table[self._segment()], (self.n_runs, self.n_arms))

    def _step(self, actions: np.ndarray) -> Step:
        row = self._table[self._segment()]
        chosen = row[actions]
        reward = (self._rng.random(actions.shape[0]) < chosen).astype(float)
        best = row.max()
        return Step(feedback=reward, reward=reward, regret=best - chosen, info={"optimal": (chosen == best).astype(float)})

    @classmethod
    def _check_examples(cls) -> list[Environment]:
        return [cls(means=[[0.8, 0.2, 0.5], [0.2, 0.8, 0.5]], change_points=[100], seed=0)]
