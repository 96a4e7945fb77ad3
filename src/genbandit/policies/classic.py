"""Classic policies every family measures itself against, vectorised over runs.

Each keeps ``_counts`` and ``_sums`` of shape ``(n_runs, n_arms)`` (or what its rule needs) and
chooses for all runs with a handful of array operations per round.
"""

from __future__ import annotations

import abc
from numbers import Integral, Real

import numpy as np

from ..core.base import Policy
from ..core.registry import register_policy
from ..core.validation import ArrayOf, Interval, InvalidParameterError
from ._stats import accumulate, choose_by_index, kl_ucb_index, sample_rows

__all__ = ["UCB1", "KLUCB", "ThompsonSampling", "GaussianThompsonSampling", "EXP3", "EpsilonGreedy", "RandomPolicy", "FixedArm", "PerRunArm", "Greedy", "BestSingle"]


class _EmpiricalMeans(Policy):
    """Shared state of the index policies: pull counts and reward sums per run and arm."""

    def _init_state(self, n_runs: int) -> None:
        self._counts = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        self._sums = np.zeros((n_runs, self.n_arms))
        # Tie-break order, a random permutation per run (see choose_by_index).
        self._priority = self._rng.permuted(np.tile(np.arange(self.n_arms), (n_runs, 1)), axis=1)

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray | None) -> None:
        accumulate(self._counts, self._sums, actions, np.asarray(feedback, dtype=float))

    def _means(self) -> np.ndarray:
        return self._sums / np.maximum(self._counts, 1)


class _IndexPolicy(_EmpiricalMeans):
    """Play the arm of largest index; untried arms first, ties by a random order drawn per run at reset."""

    @abc.abstractmethod
    def _index(self) -> np.ndarray:
        """Index of every arm, ``(n_runs, n_arms)``."""

    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        return choose_by_index(self._index(), self._counts, self._priority)


@register_policy("ucb")
class UCB1(_IndexPolicy):
    """UCB1 (Auer, Cesa-Bianchi & Fischer, 2002): mean + sqrt(alpha * ln t / n).

    Each arm is pulled once, then the arm with the largest index
    ``mean_i + sqrt(alpha * ln(t) / n_i)`` (``t`` the rounds so far, ``alpha = 2`` in the paper).

    >>> from genbandit import UCB1
    >>> policy = UCB1(n_arms=2, seed=0)
    >>> policy.select()  # untried arms first, in a random order
    1
    >>> _ = policy.update(0, 1.0); _ = policy.update(1, 0.0)
    >>> round(float(policy._index()[0, 1]), 6)  # 0 + sqrt(2 ln 2 / 1)
    1.177410
    """

    name = "UCB1"
    _parameter_constraints = {"alpha": [Interval(Real, 0, None, "left")]}

    def __init__(self, n_arms: int, alpha: float = 2.0, seed=None) -> None:
        self.n_arms = n_arms
        self.alpha = alpha
        self.seed = seed

    def _index(self) -> np.ndarray:
        n = np.maximum(self._counts, 1)
        return self._means() + np.sqrt(self.alpha * np.log(max(self._t, 1)) / n)

    def compiled_loop(self, env):
        """The compiled loop :func:`genbandit.simulate` runs for this policy on ``env``, or ``None``.

        Offered for fixed-mean Bernoulli arms (``env.reward_law == "bernoulli"``):
        :func:`genbandit.policies._classic_numba.ucb1_bernoulli_loop`, the plain loop's decisions
        round for round on the same random numbers.
        """
        if getattr(env, "reward_law", None) != "bernoulli":
            return None
        from ._classic_numba import ucb1_bernoulli_loop

        return ucb1_bernoulli_loop


@register_policy("klucb")
class KLUCB(_IndexPolicy):
    """KL-UCB for rewards in [0, 1] (Garivier & Cappe, 2011): max{q : n KL(mean, q) <= ln t + c ln ln t}.

    >>> from genbandit import KLUCB
    >>> policy = KLUCB(n_arms=2, seed=0)
    >>> for arm, r in [(0, 1.0), (1, 0.0), (0, 1.0), (1, 1.0)]:
    ...     _ = policy.update(arm, r)
    >>> policy.select()
    0
    """

    name = "KL-UCB"
    reward_range = (0.0, 1.0)
    _parameter_constraints = {"c": [Interval(Real, 0, None, "left")]}

    def __init__(self, n_arms: int, c: float = 0.0, seed=None) -> None:
        self.n_arms = n_arms
        self.c = c
        self.seed = seed

    def _index(self) -> np.ndarray:
        t = max(self._t, 1)
        level = np.log(t) + (self.c * np.log(np.log(t)) if t >= 3 else 0.0)
        return kl_ucb_index(self._means(), level / np.maximum(self._counts, 1))


@register_policy("thompson-sampling", "beta-thompson", "ts")
class ThompsonSampling(Policy):
    """Beta-Bernoulli Thompson sampling (Thompson, 1933; Agrawal & Goyal, 2012).

    Rewards in [0, 1] that are not binary go through the Bernoulli trick: a reward ``r`` counts as
    one Bernoulli(r) success or failure (Agrawal & Goyal, 2012, Algorithm 2).

    >>> from genbandit import ThompsonSampling
    >>> policy = ThompsonSampling(n_arms=3, seed=42)
    >>> policy.select()
    2
    """

    name = "Thompson"
    reward_range = (0.0, 1.0)
    _parameter_constraints = {"prior_alpha": [Interval(Real, 0, None, "neither")], "prior_beta": [Interval(Real, 0, None, "neither")]}

    def __init__(self, n_arms: int, prior_alpha: float = 1.0, prior_beta: float = 1.0, seed=None) -> None:
        self.n_arms = n_arms
        self.prior_alpha = prior_alpha
        self.prior_beta = prior_beta
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        self._successes = np.zeros((n_runs, self.n_arms))
        self._failures = np.zeros((n_runs, self.n_arms))

    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        samples = self._rng.beta(self._successes + self.prior_alpha, self._failures + self.prior_beta)
        return samples.argmax(axis=1)

    def compiled_loop(self, env):
        """The compiled loop :func:`genbandit.simulate` runs for this policy on ``env``, or ``None``.

        Offered for fixed-mean Bernoulli arms (environments whose ``reward_law`` is ``"bernoulli"``):
        :func:`genbandit.policies._classic_numba.thompson_bernoulli_loop`, the same posterior law
        with its own exact Beta sampler and random streams (see that module).
        """
        if getattr(env, "reward_law", None) != "bernoulli":
            return None
        from ._classic_numba import thompson_bernoulli_loop

        return thompson_bernoulli_loop

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray | None) -> None:
        rows = np.arange(actions.shape[0])
        # Binary rewards pass through unchanged (u < 1 is always true, u < 0 never).
        success = (self._rng.random(actions.shape[0]) < feedback).astype(float)
        self._successes[rows, actions] += success
        self._failures[rows, actions] += 1.0 - success


@register_policy("gaussian-ts")
class GaussianThompsonSampling(_EmpiricalMeans):
    """Gaussian Thompson sampling (Agrawal & Goyal, 2013): sample N(mean_i, sigma^2 / (n_i + 1)).

    The flat-prior form of the paper's Algorithm 2: an untried arm samples N(0, sigma^2).

    >>> from genbandit import GaussianThompsonSampling
    >>> GaussianThompsonSampling(n_arms=2, seed=0).select()
    1
    """

    name = "Gaussian-Thompson"
    _parameter_constraints = {"sigma": [Interval(Real, 0, None, "neither")]}

    def __init__(self, n_arms: int, sigma: float = 1.0, seed=None) -> None:
        self.n_arms = n_arms
        self.sigma = sigma
        self.seed = seed

    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        means = self._sums / (self._counts + 1.0)
        draws = means + self.sigma / np.sqrt(self._counts + 1.0) * self._rng.standard_normal(self._counts.shape)
        return draws.argmax(axis=1)


@register_policy()
class EXP3(Policy):
    """EXP3 with loss estimates and an anytime learning rate (Auer et al., 2002; Bubeck & Cesa-Bianchi, 2012, Thm 3.1).

    Plays ``p_t ∝ exp(-eta_t * L_hat)`` where ``L_hat`` sums importance-weighted losses
    ``(1 - r) / p_t(a)`` of the chosen arms, and ``eta_t = sqrt(ln K / (t K))`` unless a fixed
    ``eta`` is given. Rewards lie in [0, 1].

    >>> from genbandit import EXP3
    >>> policy = EXP3(n_arms=2, seed=0)
    >>> policy.probabilities().tolist()
    [0.5, 0.5]
    >>> _ = policy.update(0, 0.0)  # loss 1 / 0.5 = 2 on arm 0
    >>> p = policy.probabilities(); round(float(p[1] / p[0]), 6)  # exp(2 eta_2), eta_2 = sqrt(ln 2 / (2 * 2))
    2.299185
    """

    name = "EXP3"
    reward_range = (0.0, 1.0)
    _parameter_constraints = {"eta": [None, Interval(Real, 0, None, "neither")]}

    def __init__(self, n_arms: int, eta: float | None = None, seed=None) -> None:
        self.n_arms = n_arms
        self.eta = eta
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        self._loss_estimates = np.zeros((n_runs, self.n_arms))
        self._last_probabilities = None

    def _learning_rate(self) -> float:
        if self.eta is not None:
            return self.eta
        return float(np.sqrt(np.log(self.n_arms) / ((self._t + 1) * self.n_arms))) if self.n_arms > 1 else 1.0

    def _probabilities(self, contexts: np.ndarray | None) -> np.ndarray:
        logits = -self._learning_rate() * self._loss_estimates
        logits -= logits.max(axis=1, keepdims=True)
        weights = np.exp(logits)
        return weights / weights.sum(axis=1, keepdims=True)

    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        probs = self._probabilities(contexts)
        self._last_probabilities = probs
        return sample_rows(probs, self._rng)

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray | None) -> None:
        rows = np.arange(actions.shape[0])
        probs = getattr(self, "_last_probabilities", None)
        if probs is None or probs.shape[0] != actions.shape[0]:
            probs = self._probabilities(contexts)  # update without a select: use the current law
        # The floor only binds for an update of an arm whose probability underflowed (an arm
        # this policy did not choose); it keeps the estimate finite, and the arm stays at ~0.
        self._loss_estimates[rows, actions] += (1.0 - feedback) / np.maximum(probs[rows, actions], 1e-12)
        self._last_probabilities = None


@register_policy("egreedy", "epsilon")
class EpsilonGreedy(_IndexPolicy):
    """Epsilon-greedy (Sutton & Barto, 2018, sec. 2.2): a uniform arm with probability epsilon, else the best mean.

    >>> from genbandit import EpsilonGreedy
    >>> policy = EpsilonGreedy(n_arms=2, epsilon=0.0, seed=0)
    >>> _ = policy.update(0, 0.2); _ = policy.update(1, 0.9)
    >>> policy.select()
    1
    """

    name = "epsilon-greedy"
    _parameter_constraints = {"epsilon": [Interval(Real, 0, 1, "both")]}

    def __init__(self, n_arms: int, epsilon: float = 0.1, seed=None) -> None:
        self.n_arms = n_arms
        self.epsilon = epsilon
        self.seed = seed

    def _index(self) -> np.ndarray:
        return self._means()

    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        greedy = super()._select(contexts)
        n_runs = greedy.shape[0]
        explore = self._rng.random(n_runs) < self.epsilon
        return np.where(explore, self._rng.integers(self.n_arms, size=n_runs), greedy)


@register_policy("uniform")
class RandomPolicy(Policy):
    """Uniform random choice among the arms: the floor every policy must clear.

    >>> from genbandit import RandomPolicy
    >>> RandomPolicy(n_arms=4, seed=0).select()
    3
    """

    name = "random"

    def __init__(self, n_arms: int, seed=None) -> None:
        self.n_arms = n_arms
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        pass

    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        return self._rng.integers(self.n_arms, size=self._n_runs)

    def _probabilities(self, contexts: np.ndarray | None) -> np.ndarray:
        return np.full((self._n_runs, self.n_arms), 1.0 / self.n_arms)

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray | None) -> None:
        pass


@register_policy("fixed")
class FixedArm(Policy):
    """A fixed configuration: always ``arm`` (the trivial policy ``ALG_i`` of BanditSpec, eq. 2).

    ``arm`` is an index, or a name among ``arm_names`` (an environment that names its arms offers them).

    >>> from genbandit.policies.classic import FixedArm
    >>> FixedArm(n_arms=4, arm=2).select()
    2
    >>> FixedArm(n_arms=2, arm="Eagle-2", arm_names=("PLD", "Eagle-2")).select()
    1
    """

    name = "fixed-arm"
    _parameter_constraints = {"arm": [Interval(Integral, 0, None, "left"), str], "arm_names": [None, tuple, list]}

    def __init__(self, n_arms: int, arm: int | str = 0, arm_names=None, seed=None) -> None:
        self.n_arms = n_arms
        self.arm = arm
        self.arm_names = arm_names
        self.seed = seed

    @property
    def arm_index(self) -> int:
        """The index of ``arm``."""
        if isinstance(self.arm, str):
            return list(self.arm_names or ()).index(self.arm)
        return int(self.arm)

    def _check_params(self) -> None:
        if isinstance(self.arm, str) and self.arm not in (self.arm_names or ()):
            raise InvalidParameterError(f"The 'arm' parameter of {type(self).__name__} names no arm of {list(self.arm_names or ())}. Got {self.arm!r} instead.")
        if self.arm_index >= self.n_arms:
            raise InvalidParameterError(f"The 'arm' parameter of {type(self).__name__} must be below n_arms={self.n_arms}. Got {self.arm} instead.")

    def _init_state(self, n_runs: int) -> None:
        """A fixed arm learns nothing: no state."""

    def _select(self, contexts):
        return np.full(self._n_runs, self.arm_index, dtype=np.int64)

    def _update(self, actions, feedback, contexts):
        """Nothing to learn."""


@register_policy("per-run-arm")
class PerRunArm(Policy):
    """A fixed arm per run: always ``arms[r]`` in run ``r`` (repeated when there are more runs than arms).

    With the per-prompt best fixed arms an environment knows (``fastest_fixed_arms``), it is
    BanditSpec's oracle, the best fixed arm in hindsight per prompt (eq. 12).

    >>> from genbandit.policies.classic import PerRunArm
    >>> PerRunArm(n_arms=3, arms=[2, 0]).reset(2).select_batch().tolist()
    [2, 0]
    """

    name = "per-run-arm"
    _parameter_constraints = {"arms": [ArrayOf(Interval(Integral, 0, None, "left"))]}

    def __init__(self, n_arms: int, arms=(0,), seed=None) -> None:
        self.n_arms = n_arms
        self.arms = arms
        self.seed = seed

    def _check_params(self) -> None:
        if max(self.arms) >= self.n_arms:
            raise InvalidParameterError(f"The 'arms' parameter of {type(self).__name__} must be arm indices below n_arms={self.n_arms}. Got {list(self.arms)} instead.")

    def _init_state(self, n_runs: int) -> None:
        self._arms = np.resize(np.asarray(self.arms, dtype=np.int64), n_runs)

    def _select(self, contexts):
        return self._arms.copy()

    def _update(self, actions, feedback, contexts):
        """Nothing to learn."""


@register_policy()
class Greedy(_IndexPolicy):
    """Context-free greedy: the best running mean, untried arms first (the PAK-UCB paper's official code's ``greedy_selector``).

    >>> from genbandit.policies.classic import Greedy
    >>> policy = Greedy(n_arms=2, seed=0)
    >>> _ = policy.update(0, 0.2); _ = policy.update(1, 0.9)
    >>> policy.select()
    1
    """

    name = "greedy"

    def __init__(self, n_arms: int, seed=None) -> None:
        self.n_arms = n_arms
        self.seed = seed

    def _index(self) -> np.ndarray:
        return self._means()


@register_policy("one-arm-oracle")
class BestSingle(FixedArm):
    """The one-arm oracle (Hu et al. 2025, section 5): always the model that is best on average.

    ``arm`` is the best single model, which the oracle knows in advance (an environment's
    ``best_single_arm``); OtB measures every other policy against it. The rule is
    :class:`FixedArm`'s.

    >>> from genbandit.policies.classic import BestSingle
    >>> BestSingle(n_arms=3, arm=2).select()
    2
    """

    name = "best-single"
