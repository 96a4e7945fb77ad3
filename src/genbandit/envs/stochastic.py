"""Stationary stochastic arms: Bernoulli and Gaussian rewards with fixed means."""

from __future__ import annotations

import abc
from numbers import Real

import numpy as np

from ..core.base import Environment, Step
from ..core.registry import register_environment
from ..core.validation import ArrayOf, Interval, InvalidParameterError

__all__ = ["BernoulliArms", "GaussianArms"]


class _FixedMeans(Environment):
    """Arms with fixed means; regret is the gap of the chosen arm to the best mean."""

    means: np.ndarray

    def _init_state(self, n_runs: int) -> None:
        self._means = np.asarray(self.means, dtype=float)
        self._best = float(self._means.max())

    @property
    def n_arms(self) -> int:
        return len(self.means)

    def mean_rewards(self) -> np.ndarray:
        return np.broadcast_to(np.asarray(self.means, dtype=float), (self.n_runs, self.n_arms))

    def _step(self, actions: np.ndarray) -> Step:
        chosen = self._means[actions]
        reward = self._draw(chosen, actions)
        return Step(feedback=reward, reward=reward, regret=self._best - chosen, info={"optimal": (chosen == self._best).astype(float)})

    @abc.abstractmethod
    def _draw(self, chosen_means: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Rewards ``(n_runs,)`` for arms whose means are ``chosen_means``."""


@register_environment("bernoulli")
class BernoulliArms(_FixedMeans):
    """Bernoulli arms with fixed means in [0, 1].

    >>> from genbandit import BernoulliArms
    >>> env = BernoulliArms(means=[0.1, 0.9], seed=0).reset(n_runs=3)
    >>> step = env.step(np.array([1, 1, 0]))
    >>> step.reward.tolist(), step.regret.round(2).tolist()
    ([1.0, 1.0, 1.0], [0.0, 0.0, 0.8])
    """

    name = "bernoulli-arms"
    #: What compiled loops look for: fixed means, reward 1 when a uniform falls below the chosen mean.
    reward_law = "bernoulli"
    _parameter_constraints = {"means": [ArrayOf(Interval(Real, 0, 1, "both"))]}

    def __init__(self, means, seed=None) -> None:
        self.means = means
        self.seed = seed

    def _draw(self, chosen_means: np.ndarray, actions: np.ndarray) -> np.ndarray:
        return (self._rng.random(chosen_means.shape[0]) < chosen_means).astype(float)

    @classmethod
    def _check_examples(cls) -> list[Environment]:
        return [cls(means=[0.2, 0.5, 0.7], seed=0)]


@register_environment("gaussian")
class GaussianArms(_FixedMeans):
    """Gaussian arms: reward ~ N(mean_i, sigma_i^2).

    >>> from genbandit import GaussianArms
    >>> env = GaussianArms(means=[0.0, 1.0], sigma=0.5, seed=0).reset()
    >>> round(float(env.step(np.array([1])).reward[0]), 4)
    1.0629
    """

    name = "gaussian-arms"
    _parameter_constraints = {
        "means": [ArrayOf(Interval(Real, None, None))],
        "sigma": [Interval(Real, 0, None, "left"), ArrayOf(Interval(Real, 0, None, "left"))],
    }

    def __init__(self, means, sigma=1.0, seed=None) -> None:
        self.means = means
        self.sigma = sigma
        self.seed = seed

    def _check_params(self) -> None:
        if np.ndim(self.sigma) == 1 and len(self.sigma) != len(self.means):
            raise InvalidParameterError(
                f"The 'sigma' parameter of GaussianArms must be a float or one per arm ({len(self.means)}). Got {len(self.sigma)} values instead."
            )

    def _draw(self, chosen_means: np.ndarray, actions: np.ndarray) -> np.ndarray:
        sigma = np.asarray(self.sigma, dtype=float)
        scale = sigma[actions] if sigma.ndim else sigma
        return chosen_means + scale * self._rng.standard_normal(chosen_means.shape[0])

    @classmethod
    def _check_examples(cls) -> list[Environment]:
        return [cls(means=[0.0, 0.5, 1.0], sigma=[1.0, 0.5, 0.1], seed=0)]
