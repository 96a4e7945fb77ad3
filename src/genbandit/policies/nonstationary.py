"""Generic non-stationary baselines: Rexp3, Ser4 and the sliding-window UCB, Thompson sampling and KL-UCB.

Rexp3 (Besbes, Gur & Zeevi 2014) restarts EXP3 every batch; Ser4 (Allesiardo, Féraud & Maillard
2017) eliminates arms by successive passes and restarts at random; SW-UCB (Garivier & Moulines
2011), SW-TS (Trovò et al. 2020) and SW-KL-UCB (Combes & Proutière 2014) forget everything older
than a window. The rising family (TI-UCB's paper) and the smooth family (Budgeted Exploration's)
compare against them. Policies whose source assumes rewards in [0, 1] (SW-KL-UCB, Rexp3, Ser4, and
SW-TS through the Bernoulli trick) clip each observation to [0, 1]; SW-UCB learns from the raw reward.

State arrays carry a leading run axis ``(n_runs, n_arms)``; every update costs O(n_arms) per run
(ring buffers), never a refit over the history.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from ..core.base import Policy
from ..core.registry import ENVIRONMENTS, register_policy
from ..core.validation import Interval, InvalidParameterError, Options
from ._stats import argmax_random_ties, clip01, kl_ucb_index, needs_horizon_or, sample_rows

__all__ = ["Rexp3", "rexp3_tuning", "Ser4", "SWUCB", "SWTS", "SWKLUCB"]


def _bernoulli_example(cls, **params):
    """A (policy, environment) pair for the contract suite: three Bernoulli arms."""
    BernoulliArms = ENVIRONMENTS.get("BernoulliArms")
    return [(cls(n_arms=3, seed=0, **params), BernoulliArms(means=[0.2, 0.5, 0.7], seed=1))]


def rexp3_tuning(horizon: int, n_arms: int, variation_budget: float, form: str = "besbes") -> tuple[int, float]:
    """(batch length, gamma) of Rexp3 (Besbes, Gur & Zeevi 2014, Theorem 2).

    besbes: ``Delta_T = ceil((k ln k)^(1/3) (T/V_T)^(2/3))``; printed: ``ceil(k ln^(1/3) k (T/V_T)^(2/3))``,
    as Jia et al. (2023) §7.2 print it. ``gamma = min(1, sqrt(k ln k / ((e - 1) Delta_T)))``.
    The batch is capped at T: a longer one is plain EXP3 tuned for T.

    >>> batch, gamma = rexp3_tuning(10**6, 2, 0.05, form="printed")
    >>> batch, round(gamma, 5)
    (130415, 0.00249)
    """
    k = float(n_arms)
    lk = math.log(k) if k > 1 else 0.0
    scale = (horizon / variation_budget) ** (2 / 3)
    raw = k * lk ** (1 / 3) * scale if form == "printed" else (k * lk) ** (1 / 3) * scale
    batch = int(min(max(math.ceil(raw), 1), horizon))
    gamma = min(1.0, math.sqrt(k * lk / ((math.e - 1.0) * batch))) if k > 1 else 1.0
    return batch, gamma


@register_policy("rexp3")
class Rexp3(Policy):
    """Rexp3 (Besbes, Gur & Zeevi, NeurIPS 2014, Algorithm 1): EXP3 restarted every batch of Delta_T rounds.

    Batch and ``gamma`` from :func:`rexp3_tuning` unless given; at each batch start the weights
    return to 1. Within a batch, ``p_i = (1 - γ) w_i / Σ_k w_k + γ / K`` and the played arm's weight
    is multiplied by ``exp(γ x / (p_i K))``, ``x = (X - reward_min) / (reward_max - reward_min)``
    clipped to [0, 1]. ``variation_budget`` ``V_T`` defaults to ``K`` (TI-UCB paper, App. C). The
    normaliser sums over *all* arms (the public code the TI-UCB paper likely used omits the played
    arm). The smooth family's setting is :class:`~genbandit.policies.smooth.SmoothRexp3`.

    >>> from genbandit.policies.nonstationary import Rexp3
    >>> policy = Rexp3(n_arms=2, horizon=1000, seed=0)
    >>> policy.batch_, round(policy.gamma_, 6)
    (71, 0.106599)
    >>> _ = policy.update(0, 1.0)  # w_0 = exp(γ * 1 / (0.5 * 2))
    >>> round(float(policy.probabilities()[0]), 6)
    0.523786
    """

    name = "Rexp3"
    reward_range = None
    _parameter_constraints = {
        "horizon": [None, Interval(Integral, 1, None, "left")],
        "variation_budget": [None, Interval(Real, 0, None, "neither")],
        "batch": [None, Interval(Integral, 1, None, "left")],
        "gamma": [None, Interval(Real, 0, 1, "both")],
        "batch_form": [Options(("besbes", "printed"))],
        "reward_min": [Interval(Real, None, None)],
        "reward_max": [Interval(Real, None, None)],
    }

    def __init__(self, n_arms: int, horizon: int | None = None, variation_budget: float | None = None, batch: int | None = None,
                 gamma: float | None = None, batch_form: str = "besbes", reward_min: float = 0.0, reward_max: float = 1.0,
                 seed=None) -> None:
        self.n_arms = n_arms
        self.horizon = horizon
        self.variation_budget = variation_budget
        self.batch = batch
        self.gamma = gamma
        self.batch_form = batch_form
        self.reward_min = reward_min
        self.reward_max = reward_max
        self.seed = seed

    def _check_params(self) -> None:
        needs_horizon_or(self.batch, self.horizon, "batch", type(self).__name__)
        if not self.reward_max > self.reward_min:
            raise InvalidParameterError(f"reward_max must exceed reward_min. Got {self.reward_min!r}, {self.reward_max!r}.")

    @property
    def batch_(self) -> int:
        """``Delta_T``: the rounds between restarts."""
        if self.batch is not None:
            return int(self.batch)
        budget = self.variation_budget if self.variation_budget is not None else float(self.n_arms)
        return rexp3_tuning(self.horizon, self.n_arms, budget, self.batch_form)[0]

    @property
    def gamma_(self) -> float:
        """``gamma``: the share of uniform exploration."""
        if self.gamma is not None:
            return float(self.gamma)
        k = self.n_arms
        return min(1.0, math.sqrt(k * math.log(k) / ((math.e - 1.0) * self.batch_))) if k > 1 else 1.0

    def _init_state(self, n_runs: int) -> None:
        self._batch, self._gamma = self.batch_, self.gamma_
        self._log_weights = np.zeros((n_runs, self.n_arms))

    def _probabilities(self, contexts):
        w = np.exp(self._log_weights - self._log_weights.max(axis=1, keepdims=True))
        return (1.0 - self._gamma) * w / w.sum(axis=1, keepdims=True) + self._gamma / self.n_arms

    def _select(self, contexts):
        return sample_rows(self._probabilities(contexts), self._rng)

    def _update(self, actions, feedback, contexts):
        rows = np.arange(actions.shape[0])
        p = self._probabilities(contexts)[rows, actions]
        x = clip01((feedback - self.reward_min) / (self.reward_max - self.reward_min))
        self._log_weights[rows, actions] += self._gamma * x / (p * self.n_arms)
        if (self._t + 1) % self._batch == 0:
            self._log_weights[:] = 0.0

    @classmethod
    def _check_examples(cls):
        return _bernoulli_example(cls, horizon=300)


@register_policy("ser4")
class Ser4(Policy):
    """SER4 (Allesiardo, Feraud & Maillard, 2017, Algorithm 4): successive elimination, random round-robin, random resets.

    Active arms are played in passes, each pass in a fresh random order. After pass ``tau`` (every
    active arm then has ``tau`` samples since the last reset), arm ``k`` is eliminated when
    ``max_j mean_j - mean_k + epsilon >= sqrt(ln(4 K tau^2 / delta) / (2 tau))`` (SER3's rule; the
    empirical best arm is never eliminated). After every round, with probability ``phi`` all arms
    come back and the estimates restart. Defaults as the TI-UCB paper (App. C): ``delta = 1/T``,
    ``epsilon = 1/(K T)``, ``phi = sqrt(N ln(K T) / (T K))`` with ``N = n_switches = 1`` (the paper
    leaves N, the number of best-arm switches, undefined). Rewards are clipped to [0, 1].

    >>> from genbandit.policies.nonstationary import Ser4
    >>> policy = Ser4(n_arms=2, horizon=1000, phi=0.0, seed=0)
    >>> round(policy.elimination_width(1), 6)  # sqrt(ln(4 * 2 * 1 / 1e-3) / 2)
    2.119811
    """

    name = "Ser4"
    reward_range = None
    _parameter_constraints = {
        "horizon": [None, Interval(Integral, 1, None, "left")],
        "delta": [None, Interval(Real, 0, 1, "neither")],
        "epsilon": [None, Interval(Real, 0, None, "left")],
        "phi": [None, Interval(Real, 0, 1, "both")],
        "n_switches": [Interval(Real, 0, None, "left")],
    }

    def __init__(self, n_arms: int, horizon: int | None = None, delta: float | None = None, epsilon: float | None = None,
                 phi: float | None = None, n_switches: float = 1.0, seed=None) -> None:
        self.n_arms = n_arms
        self.horizon = horizon
        self.delta = delta
        self.epsilon = epsilon
        self.phi = phi
        self.n_switches = n_switches
        self.seed = seed

    def _check_params(self) -> None:
        for what in ("delta", "epsilon", "phi"):
            needs_horizon_or(getattr(self, what), self.horizon, what, type(self).__name__)

    def _resolved(self) -> tuple[float, float, float]:
        k, t = self.n_arms, self.horizon
        delta = self.delta if self.delta is not None else 1.0 / t
        eps = self.epsilon if self.epsilon is not None else 1.0 / (k * t)
        phi = self.phi if self.phi is not None else min(1.0, math.sqrt(self.n_switches * math.log(k * t) / (t * k)))
        return delta, eps, phi

    def elimination_width(self, tau):
        """``sqrt(ln(4 K tau^2 / delta) / (2 tau))``."""
        delta = self._resolved()[0]
        tau = np.asarray(tau, dtype=float)
        out = np.sqrt(np.log(4.0 * self.n_arms * tau**2 / delta) / (2.0 * tau))
        return float(out) if out.ndim == 0 else out

    def _init_state(self, n_runs: int) -> None:
        self._active = np.ones((n_runs, self.n_arms), dtype=bool)
        self._pending = np.ones((n_runs, self.n_arms), dtype=bool)
        self._sums = np.zeros((n_runs, self.n_arms))
        self._tau = np.ones(n_runs, dtype=np.int64)
        self._resets = np.zeros(n_runs, dtype=np.int64)

    def _select(self, contexts):
        # A uniformly random pending arm: the same law as walking a random permutation of the pass.
        return argmax_random_ties(np.where(self._pending, 0.0, -np.inf), self._rng)

    def _update(self, actions, feedback, contexts):
        rows = np.arange(actions.shape[0])
        self._sums[rows, actions] += clip01(feedback)
        self._pending[rows, actions] = False
        done = ~self._pending.any(axis=1)
        if done.any():
            _, eps, _ = self._resolved()
            tau = self._tau[done]
            means = np.where(self._active[done], self._sums[done] / tau[:, None], -np.inf)
            best = means.max(axis=1, keepdims=True)
            width = self.elimination_width(tau)[:, None]
            drop = self._active[done] & (best - means + eps >= width)
            drop[np.arange(drop.shape[0]), means.argmax(axis=1)] = False
            self._active[done] &= ~drop
            self._tau[done] += 1
            self._pending[done] = self._active[done]
        reset = self._rng.random(actions.shape[0]) < self._resolved()[2]
        if reset.any():
            self._active[reset] = True
            self._pending[reset] = True
            self._sums[reset] = 0.0
            self._tau[reset] = 1
            self._resets[reset] += 1

    def diagnostics(self) -> dict:
        """``resets_per_run``: the random restarts of each run."""
        return {"resets_per_run": self._resets.tolist()}

    @classmethod
    def _check_examples(cls):
        return _bernoulli_example(cls, horizon=300)


class _SlidingWindow(Policy):
    """Counts and sums of each arm over the last ``window`` rounds, kept with a ring buffer.

    When the window slides, the outcome that leaves it is removed from *its own* arm's statistics
    (the public code the TI-UCB paper likely used removes it from the arm being pulled).
    """

    reward_range = None
    #: Whether the default window is computed from ``horizon`` (so one of the two must be given).
    _window_from_horizon = True

    def _check_params(self) -> None:
        if self._window_from_horizon:
            needs_horizon_or(self.window, self.horizon, "window", type(self).__name__)

    def _window(self) -> int:
        return int(self.window) if self.window is not None else self._default_window()

    def _default_window(self) -> int:
        raise NotImplementedError

    def _transform(self, feedback: np.ndarray) -> np.ndarray:
        return feedback

    def _init_state(self, n_runs: int) -> None:
        w = self._window()
        self._w_counts = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        self._w_sums = np.zeros((n_runs, self.n_arms))
        self._past_arms = np.full((n_runs, w), -1, dtype=np.int64)
        self._past_values = np.zeros((n_runs, w))

    def _update(self, actions, feedback, contexts):
        rows = np.arange(actions.shape[0])
        value = self._transform(feedback)
        slot = self._t % self._window()
        old = self._past_arms[:, slot]
        full = old >= 0
        if full.any():
            self._w_counts[rows[full], old[full]] -= 1
            self._w_sums[rows[full], old[full]] -= self._past_values[full, slot]
        self._w_counts[rows, actions] += 1
        self._w_sums[rows, actions] += value
        self._past_arms[:, slot] = actions
        self._past_values[:, slot] = value

    def _window_means(self) -> np.ndarray:
        return self._w_sums / np.maximum(self._w_counts, 1)


@register_policy("swucb", "sliding-window-ucb")
class SWUCB(_SlidingWindow):
    """SW-UCB (Garivier & Moulines, ALT 2011, sec. 4): UCB on the last tau rounds.

    Index ``mean_tau,i + B sqrt(xi ln(min(t, tau)) / N_tau,i)``, with ``N_tau,i`` and the mean over
    the last ``tau`` rounds, ``t`` the rounds played so far; an arm absent from the window is
    played first. Defaults as the TI-UCB paper (App. C): ``tau = 4 sqrt(T ln T)`` (floored),
    ``xi = 0.6``, ``B = 1``. Raw rewards.

    >>> from genbandit.policies.nonstationary import SWUCB
    >>> policy = SWUCB(n_arms=2, window=2, seed=0)
    >>> for arm, r in [(0, 1.0), (1, 0.5), (0, 0.0)]:  # the window now holds (1, 0.5), (0, 0.0)
    ...     _ = policy.update(arm, r)
    >>> policy._w_counts.tolist(), policy._w_sums.tolist()
    ([[1, 1]], [[0.0, 0.5]])
    >>> policy.select()  # 0.5 + sqrt(0.6 ln 2) beats 0.0 + sqrt(0.6 ln 2)
    1
    """

    name = "SW-UCB"
    _parameter_constraints = {
        "horizon": [None, Interval(Integral, 1, None, "left")],
        "window": [None, Interval(Integral, 1, None, "left")],
        "xi": [Interval(Real, 0, None, "neither")],
        "scale": [Interval(Real, 0, None, "neither")],
    }

    def __init__(self, n_arms: int, horizon: int | None = None, window: int | None = None, xi: float = 0.6,
                 scale: float = 1.0, seed=None) -> None:
        self.n_arms = n_arms
        self.horizon = horizon
        self.window = window
        self.xi = xi
        self.scale = scale
        self.seed = seed

    def _default_window(self) -> int:
        return max(1, int(4.0 * math.sqrt(self.horizon * math.log(max(self.horizon, 2)))))

    def _select(self, contexts):
        horizon = max(min(self._t, self._window()), 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            width = self.scale * np.sqrt(self.xi * math.log(horizon) / self._w_counts)
        index = np.where(self._w_counts == 0, np.inf, self._window_means() + width)
        return argmax_random_ties(index, self._rng)

    @classmethod
    def _check_examples(cls):
        return _bernoulli_example(cls, window=50)


@register_policy("swts", "sliding-window-ts")
class SWTS(_SlidingWindow):
    """SW-TS (Trovo, Paladino, Restelli & Gatti, JAIR 2020, Algorithm 1): Beta-Bernoulli TS on the last tau rounds.

    Each reward, clipped to [0, 1], becomes a Bernoulli success with that probability (the
    Bernoulli trick); arm ``i`` samples ``Beta(S_i + 1, F_i + 1)`` from its successes and failures
    in the last ``tau`` rounds, and the largest sample is played. Default window, as the TI-UCB
    paper (App. C): ``tau = ceil(T^(1 - beta))`` with ``beta = 1/2``.

    >>> from genbandit.policies.nonstationary import SWTS
    >>> policy = SWTS(n_arms=2, window=3, seed=0)
    >>> for arm, r in [(0, 1.0), (0, 1.0), (1, 0.0), (1, 0.0)]:
    ...     _ = policy.update(arm, r)
    >>> policy._w_counts.tolist(), policy._w_sums.tolist()  # pulls and successes in the window
    ([[1, 2]], [[1.0, 0.0]])
    """

    name = "SW-TS"
    _parameter_constraints = {
        "horizon": [None, Interval(Integral, 1, None, "left")],
        "window": [None, Interval(Integral, 1, None, "left")],
        "beta": [Interval(Real, 0, 1, "neither")],
    }

    def __init__(self, n_arms: int, horizon: int | None = None, window: int | None = None, beta: float = 0.5,
                 seed=None) -> None:
        self.n_arms = n_arms
        self.horizon = horizon
        self.window = window
        self.beta = beta
        self.seed = seed

    def _default_window(self) -> int:
        return max(1, math.ceil(self.horizon ** (1.0 - self.beta)))

    def _transform(self, feedback):
        return (self._rng.random(feedback.shape[0]) < clip01(feedback)).astype(float)

    def _select(self, contexts):
        successes = self._w_sums
        failures = self._w_counts - successes
        return self._rng.beta(successes + 1.0, failures + 1.0).argmax(axis=1)

    @classmethod
    def _check_examples(cls):
        return _bernoulli_example(cls, window=20)


@register_policy("swklucb", "sliding-window-kl-ucb")
class SWKLUCB(_SlidingWindow):
    """SW-KL-UCB (Combes & Proutiere, ICML 2014, sec. 5): KL-UCB on the last tau rounds.

    Index ``max{q : N_tau,i KL(mean_tau,i, q) <= ln(m) + c ln ln(m)}`` with ``m = min(t, tau)``
    (the ``ln ln`` term only once ``m >= 3``), means of rewards clipped to [0, 1] over the last
    ``tau`` rounds; arms absent from the window first. Defaults as the TI-UCB paper (App. C):
    ``tau = ceil(sigma^(-4/5))`` with ``sigma = 0.001`` (so 252) and ``c = 3``.

    >>> from genbandit.policies.nonstationary import SWKLUCB
    >>> SWKLUCB(n_arms=2)._window()
    252
    """

    name = "SW-KL-UCB"
    _parameter_constraints = {
        "window": [None, Interval(Integral, 1, None, "left")],
        "sigma": [Interval(Real, 0, 1, "neither")],
        "c": [Interval(Real, 0, None, "left")],
    }

    def __init__(self, n_arms: int, window: int | None = None, sigma: float = 0.001, c: float = 3.0, seed=None) -> None:
        self.n_arms = n_arms
        self.window = window
        self.sigma = sigma
        self.c = c
        self.seed = seed

    _window_from_horizon = False

    def _default_window(self) -> int:
        return math.ceil(self.sigma ** (-0.8) - 1e-9)

    def _transform(self, feedback):
        return clip01(feedback)

    def _select(self, contexts):
        m = max(min(self._t, self._window()), 1)
        level = math.log(m) + (self.c * math.log(math.log(m)) if m >= 3 else 0.0)
        index = kl_ucb_index(self._window_means(), level / np.maximum(self._w_counts, 1))
        return argmax_random_ties(np.where(self._w_counts == 0, np.inf, index), self._rng)

    @classmethod
    def _check_examples(cls):
        return _bernoulli_example(cls, window=30)
