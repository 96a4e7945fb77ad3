"""Rested rising bandits: TI-UCB (Xia et al., WWW 2024) and the baselines its paper compares against.

Every arm's expected reward rises with the number of times *that arm* was pulled, then converges
(a fine-tuning run that gets one more step each time it is chosen). TI-UCB predicts each arm's next
reward with a least-squares line over the arm's observations since its last detected change, adds a
confidence width, and resets an arm whose two most recent ω-windows predict different futures.

The baselines follow their own sources, not the public code the TI-UCB paper most likely ran (the
spec, section 2.2, lists that code's bugs: windows that subtract the wrong arm, Beta(N+1, F+1),
means divided by the global round, Ser4 never eliminating; none is reproduced here). Policies whose
source assumes rewards in [0, 1] (KL-UCB, SW-KL-UCB, Rexp3, Ser4, and SW-TS through the Bernoulli
trick) clip each observation to [0, 1]; TI-UCB, R-ed-UCB and SW-UCB learn from the raw reward.

State arrays carry a leading run axis ``(n_runs, n_arms)``; every update costs O(n_arms) per run
(prefix sums, ring buffers), never a refit over the history.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from ..core.base import Policy
from ..core.registry import ENVIRONMENTS, register_policy
from ..core.validation import Interval, InvalidParameterError, Options
from ._stats import argmax_random_ties, kl_ucb_index, sample_rows
from .classic import KLUCB

__all__ = ["TIUCB", "ClippedKLUCB", "Rexp3", "rexp3_tuning", "Ser4", "SWUCB", "SWTS", "SWKLUCB", "RedUCB", "trend_prediction"]


def trend_prediction(sum_y, sum_sy, lo, hi, x0):
    """Least-squares line through ``(s, X_s)``, ``s = lo..hi``, evaluated at ``x0`` (TI-UCB, App. A).

    Takes the sufficient statistics ``sum_y = Σ X_s`` and ``sum_sy = Σ s X_s`` (prefix-sum
    differences), so the fit costs O(1). A one-point window has no slope: it predicts its value.
    All arguments broadcast.

    >>> float(trend_prediction(1.0 + 2.0 + 3.0, 1 * 1.0 + 2 * 2.0 + 3 * 3.0, 1, 3, 4))  # X_s = s
    4.0
    """
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    m = hi - lo + 1.0
    centre = 0.5 * (lo + hi)
    sxx = m * (m * m - 1.0) / 12.0
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = np.where(m >= 2.0, (sum_sy - centre * sum_y) / np.where(m >= 2.0, sxx, 1.0), 0.0)
        return sum_y / np.maximum(m, 1.0) + slope * (x0 - centre)


def _needs(value, horizon, what: str, owner: str):
    if value is None and horizon is None:
        raise InvalidParameterError(f"{owner} needs either 'horizon' or an explicit '{what}'.")


def _clip01(x: np.ndarray) -> np.ndarray:
    return np.clip(x, 0.0, 1.0)


@register_policy("tiucb", "ti_ucb")
class TIUCB(Policy):
    """TI-UCB (Xia et al., WWW 2024, Algorithm 1): least-squares trend UCB with change detection.

    For every arm with ``n`` observations since its last reset, the index is the least-squares
    line through ``(s, X_s)``, ``s = 1..n``, evaluated at ``n + 1`` (App. A.1), plus the width
    ``conf_c * sqrt(2 ln(1/delta) / n)`` (Proposition 1, ``conf_c = 16``); untried arms first,
    ties at random. After a pull, once the arm has ``2 omega`` observations since its reset, the
    lines fitted on the windows ``w1 = [n-2ω+1, n-ω]`` and ``w2 = [n-ω+1, n]`` are both evaluated
    at ``n + 1`` (the paper's w2 coefficient predicts at ``n``, a typo: spec trap T6); when they
    differ by more than ``gamma / 2`` the arm's history restarts from its newest observation
    (Line 11: ``n <- 1``). ``delta`` defaults to ``1 / horizon`` (Theorem 3 needs ``delta <= 1/T``;
    the paper does not state its value). Prefix sums make each round O(n_arms).

    Parameters
    ----------
    n_arms : int
    horizon : int, optional
        Sets ``delta = 1 / horizon`` when ``delta`` is not given.
    delta : float in (0, 1), optional
    omega : int, default 100
        Change-detection window.
    gamma : float, default 0.3
        Change threshold (a change fires when the window predictions differ by more than gamma/2).
    conf_c : float, default 16
        Multiplier of the confidence width (the paper's constant; spec trap T3 shows how much it matters).

    Examples
    --------
    >>> from genbandit.policies.rising import TIUCB
    >>> policy = TIUCB(n_arms=2, horizon=1000, seed=0)
    >>> for x in (0.1, 0.2, 0.3):
    ...     _ = policy.update(0, x)
    >>> round(float(policy._predictions()[0, 0]), 6)  # the line through (1, .1), (2, .2), (3, .3) at 4
    0.4
    >>> policy.select()  # arm 1 was never pulled
    1
    """

    name = "TI-UCB"
    _parameter_constraints = {
        "horizon": [None, Interval(Integral, 1, None, "left")],
        "delta": [None, Interval(Real, 0, 1, "neither")],
        "omega": [Interval(Integral, 1, None, "left")],
        "gamma": [Interval(Real, 0, None, "left")],
        "conf_c": [Interval(Real, 0, None, "left")],
    }

    def __init__(self, n_arms: int, horizon: int | None = None, delta: float | None = None, omega: int = 100,
                 gamma: float = 0.3, conf_c: float = 16.0, seed=None) -> None:
        self.n_arms = n_arms
        self.horizon = horizon
        self.delta = delta
        self.omega = omega
        self.gamma = gamma
        self.conf_c = conf_c
        self.seed = seed

    def _check_params(self) -> None:
        _needs(self.delta, self.horizon, "delta", type(self).__name__)

    @property
    def width_constant(self) -> float:
        """``conf_c * sqrt(2 ln(1/delta))``: the width is this over ``sqrt(n)``."""
        delta = self.delta if self.delta is not None else 1.0 / self.horizon
        return self.conf_c * math.sqrt(2.0 * math.log(1.0 / delta)) if delta < 1.0 else 0.0

    def _init_state(self, n_runs: int) -> None:
        ring = 2 * self.omega + 1  # prefix sums P[n-2ω..n] of the current segment
        self._n = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        self._sum_y = np.zeros((n_runs, self.n_arms))
        self._sum_sy = np.zeros((n_runs, self.n_arms))
        self._prefix_y = np.zeros((n_runs, self.n_arms, ring))
        self._prefix_sy = np.zeros((n_runs, self.n_arms, ring))
        self._resets = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        self._last_reset = np.ones((n_runs, self.n_arms), dtype=np.int64)  # tau'_i, logged only

    def _predictions(self) -> np.ndarray:
        """Least-squares prediction of every arm's next reward, ``(n_runs, n_arms)`` (NaN if unpulled)."""
        n = self._n.astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            pred = trend_prediction(self._sum_y, self._sum_sy, 1.0, n, n + 1.0)
        return np.where(self._n > 0, pred, np.nan)

    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            index = self._predictions() + self.width_constant / np.sqrt(self._n)
        return argmax_random_ties(np.where(self._n == 0, np.inf, index), self._rng)

    def _window_predictions(self, rows: np.ndarray, arms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Predictions at ``n + 1`` of the lines on w1 and w2 for (run, arm) pairs with ``n >= 2ω``."""
        w, ring = self.omega, 2 * self.omega + 1
        n = self._n[rows, arms]
        p_y = [self._prefix_y[rows, arms, (n - k * w) % ring] for k in (0, 1, 2)]
        p_sy = [self._prefix_sy[rows, arms, (n - k * w) % ring] for k in (0, 1, 2)]
        x0 = n + 1.0
        first = trend_prediction(p_y[1] - p_y[2], p_sy[1] - p_sy[2], n - 2 * w + 1, n - w, x0)
        second = trend_prediction(p_y[0] - p_y[1], p_sy[0] - p_sy[1], n - w + 1, n, x0)
        return first, second

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray | None) -> None:
        rows = np.arange(actions.shape[0])
        ring = 2 * self.omega + 1
        n = self._n[rows, actions] + 1
        self._n[rows, actions] = n
        self._sum_y[rows, actions] += feedback
        self._sum_sy[rows, actions] += n * feedback
        self._prefix_y[rows, actions, n % ring] = self._sum_y[rows, actions]
        self._prefix_sy[rows, actions, n % ring] = self._sum_sy[rows, actions]
        check = n >= 2 * self.omega
        if not check.any():
            return
        r, a = rows[check], actions[check]
        first, second = self._window_predictions(r, a)
        fired = np.abs(first - second) > self.gamma / 2.0
        if fired.any():
            r, a, x = r[fired], a[fired], feedback[r[fired]]
            self._n[r, a] = 1  # Line 11: the newest observation becomes s = 1 of the new segment
            self._sum_y[r, a] = x
            self._sum_sy[r, a] = x
            self._prefix_y[r, a, 0] = 0.0
            self._prefix_sy[r, a, 0] = 0.0
            self._prefix_y[r, a, 1] = x
            self._prefix_sy[r, a, 1] = x
            self._resets[r, a] += 1
            self._last_reset[r, a] = self._t + 1

    @classmethod
    def _check_examples(cls):
        RestedRisingArms = ENVIRONMENTS.get("RestedRisingArms")

        env = RestedRisingArms(instance="two-arm", horizon=400, seed=1)
        return [(cls(n_arms=2, horizon=400, omega=5, seed=0), env), (cls(n_arms=2, delta=0.1, omega=1, conf_c=1.0, seed=0), env)]


def _rested_example(cls, **params):
    RestedRisingArms = ENVIRONMENTS.get("RestedRisingArms")

    env = RestedRisingArms(instance="two-arm", horizon=300, seed=1)
    return [(cls(n_arms=2, seed=0, **params), env)]


@register_policy("klucb-clipped")
class ClippedKLUCB(KLUCB):
    """KL-UCB (Garivier & Cappe, 2011) on rewards clipped to [0, 1], for arms whose noise leaves [0, 1].

    The foundation's :class:`~genbandit.policies.classic.KLUCB` (index ``max{q : n KL(mean, q) <=
    ln t + c ln ln t}``, ``t`` the rounds played so far) with the TI-UCB paper's ``c = 3`` (App. C);
    each observation is clipped to [0, 1] before it enters the mean.

    >>> from genbandit.policies.rising import ClippedKLUCB
    >>> policy = ClippedKLUCB(n_arms=2, seed=0)
    >>> _ = policy.update(0, 1.3); _ = policy.update(1, -0.2)
    >>> policy._means().tolist()
    [[1.0, 0.0]]
    """

    name = "KL-UCB (clipped)"
    reward_range = None

    def __init__(self, n_arms: int, c: float = 3.0, seed=None) -> None:
        self.n_arms = n_arms
        self.c = c
        self.seed = seed

    def _update(self, actions, feedback, contexts):
        super()._update(actions, _clip01(feedback), contexts)

    @classmethod
    def _check_examples(cls):
        return _rested_example(cls)


def rexp3_tuning(horizon: int, n_arms: int, variation_budget: float, form: str = "besbes") -> tuple[int, float]:
    """(batch length, gamma) of Rexp3 (Besbes, Gur & Zeevi 2014, Theorem 2).

    besbes: ``Delta_T = ceil((k ln k)^(1/3) (T/V_T)^(2/3))``; printed: ``ceil(k ln^(1/3) k (T/V_T)^(2/3))``,
    as Jia et al. (2023) §7.2 print it (smooth spec, trap T8). ``gamma = min(1, sqrt(k ln k / ((e - 1) Delta_T)))``.
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
    arm: spec T12). The smooth family's setting is :class:`~genbandit.policies.smooth.SmoothRexp3`.

    >>> from genbandit.policies.rising import Rexp3
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
        _needs(self.batch, self.horizon, "batch", type(self).__name__)
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
        x = _clip01((feedback - self.reward_min) / (self.reward_max - self.reward_min))
        self._log_weights[rows, actions] += self._gamma * x / (p * self.n_arms)
        if (self._t + 1) % self._batch == 0:
            self._log_weights[:] = 0.0

    @classmethod
    def _check_examples(cls):
        return _rested_example(cls, horizon=300)


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

    >>> from genbandit.policies.rising import Ser4
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
            _needs(getattr(self, what), self.horizon, what, type(self).__name__)

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
        self._sums[rows, actions] += _clip01(feedback)
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

    @classmethod
    def _check_examples(cls):
        return _rested_example(cls, horizon=300)


class _SlidingWindow(Policy):
    """Counts and sums of each arm over the last ``window`` rounds, kept with a ring buffer.

    When the window slides, the outcome that leaves it is removed from *its own* arm's statistics
    (the public code the TI-UCB paper likely used removes it from the arm being pulled: spec T12).
    """

    reward_range = None
    #: Whether the default window is computed from ``horizon`` (so one of the two must be given).
    _window_from_horizon = True

    def _check_params(self) -> None:
        if self._window_from_horizon:
            _needs(self.window, self.horizon, "window", type(self).__name__)

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

    >>> from genbandit.policies.rising import SWUCB
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
        return _rested_example(cls, window=50)


@register_policy("swts", "sliding-window-ts")
class SWTS(_SlidingWindow):
    """SW-TS (Trovo, Paladino, Restelli & Gatti, JAIR 2020, Algorithm 1): Beta-Bernoulli TS on the last tau rounds.

    Each reward, clipped to [0, 1], becomes a Bernoulli success with that probability (the
    Bernoulli trick); arm ``i`` samples ``Beta(S_i + 1, F_i + 1)`` from its successes and failures
    in the last ``tau`` rounds, and the largest sample is played. Default window, as the TI-UCB
    paper (App. C): ``tau = ceil(T^(1 - beta))`` with ``beta = 1/2``.

    >>> from genbandit.policies.rising import SWTS
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
        return (self._rng.random(feedback.shape[0]) < _clip01(feedback)).astype(float)

    def _select(self, contexts):
        successes = self._w_sums
        failures = self._w_counts - successes
        return self._rng.beta(successes + 1.0, failures + 1.0).argmax(axis=1)

    @classmethod
    def _check_examples(cls):
        return _rested_example(cls, window=20)


@register_policy("swklucb", "sliding-window-kl-ucb")
class SWKLUCB(_SlidingWindow):
    """SW-KL-UCB (Combes & Proutiere, ICML 2014, sec. 5): KL-UCB on the last tau rounds.

    Index ``max{q : N_tau,i KL(mean_tau,i, q) <= ln(m) + c ln ln(m)}`` with ``m = min(t, tau)``
    (the ``ln ln`` term only once ``m >= 3``), means of rewards clipped to [0, 1] over the last
    ``tau`` rounds; arms absent from the window first. Defaults as the TI-UCB paper (App. C):
    ``tau = ceil(sigma^(-4/5))`` with ``sigma = 0.001`` (so 252) and ``c = 3``.

    >>> from genbandit.policies.rising import SWKLUCB
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
        return _clip01(feedback)

    def _select(self, contexts):
        m = max(min(self._t, self._window()), 1)
        level = math.log(m) + (self.c * math.log(math.log(m)) if m >= 3 else 0.0)
        index = kl_ucb_index(self._window_means(), level / np.maximum(self._w_counts, 1))
        return argmax_random_ties(np.where(self._w_counts == 0, np.inf, index), self._rng)

    @classmethod
    def _check_examples(cls):
        return _rested_example(cls, window=30)


@register_policy("redUCB", "r-ed-ucb", "rested-ucb")
class RedUCB(Policy):
    """R-ed-UCB (Metelli, Trovo, Pirola & Restelli, ICML 2022, Algorithm 1, rested estimator).

    With ``N`` pulls of arm ``i`` and ``h = floor(epsilon N)``, the index at round ``t`` is

        mean_h(t) = (1/h) Σ_{l=N-h+1..N} [R(l) + (t - l) (R(l) - R(l-h)) / h]
        beta_h(t) = sigma (t - N + h - 1) sqrt(10 ln(1/delta_t) / h^3),   delta_t = t^(-4),

    (an arm with ``h = 0`` is played first). The history is kept as prefix sums of ``R`` and
    ``l R``, in blocks of a per-run pool, so an index costs O(1) and memory grows with the pulls
    made. ``beta_cap`` caps the width (the public code caps it at 1 on real data; off by default).

    >>> from genbandit.policies.rising import RedUCB
    >>> policy = RedUCB(n_arms=1, epsilon=0.5, seed=0)
    >>> for x in (0.1, 0.2, 0.4, 0.5):
    ...     _ = policy.update(0, x)
    >>> round(float(policy._mean_estimate(10)[0, 0]), 6)  # ((.4 + 7*.3/2) + (.5 + 6*.3/2)) / 2
    1.425
    """

    name = "R-ed-UCB"
    reward_range = None
    _block = 1024
    _parameter_constraints = {
        "epsilon": [Interval(Real, 0, 0.5, "right")],
        "sigma": [Interval(Real, 0, None, "left")],
        "beta_cap": [None, Interval(Real, 0, None, "neither")],
    }

    def __init__(self, n_arms: int, epsilon: float = 0.25, sigma: float = 0.1, beta_cap: float | None = None,
                 seed=None) -> None:
        self.n_arms = n_arms
        self.epsilon = epsilon
        self.sigma = sigma
        self.beta_cap = beta_cap
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        b = self._block
        self._n = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        self._h = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        self._level = np.zeros((n_runs, self.n_arms))  # index = level + t * trend (+ width)
        self._trend = np.zeros((n_runs, self.n_arms))
        # Block pool: P[l] of arm a in run r lives at pool[r, table[r, a, l // b] * b + l % b].
        self._table = np.full((n_runs, self.n_arms, 4), -1, dtype=np.int64)
        self._table[:, :, 0] = np.arange(self.n_arms)
        self._pool_y = np.zeros((n_runs, b * self.n_arms * 2))
        self._pool_sy = np.zeros((n_runs, b * self.n_arms * 2))
        self._next_block = np.full(n_runs, self.n_arms, dtype=np.int64)

    def _slot(self, rows, arms, ell):
        b = self._block
        return self._table[rows, arms, ell // b] * b + ell % b

    def _prefix(self, rows, arms, ell):
        slot = self._slot(rows, arms, ell)
        return self._pool_y[rows, slot], self._pool_sy[rows, slot]

    def _grow(self, rows, arms, n):
        b = self._block
        fresh = n % b == 0
        if not fresh.any():
            return
        need = int((n[fresh] // b).max()) + 1
        if need > self._table.shape[2]:
            extra = np.full(self._table.shape[:2] + (max(need, 2 * self._table.shape[2]) - self._table.shape[2],), -1, dtype=np.int64)
            self._table = np.concatenate([self._table, extra], axis=2)
        r, a = rows[fresh], arms[fresh]
        self._table[r, a, n[fresh] // b] = self._next_block[r]
        self._next_block[r] += 1
        if self._next_block.max() * b > self._pool_y.shape[1]:
            pad = np.zeros((self._pool_y.shape[0], self._pool_y.shape[1]))
            self._pool_y = np.concatenate([self._pool_y, pad], axis=1)
            self._pool_sy = np.concatenate([self._pool_sy, pad.copy()], axis=1)

    def _mean_estimate(self, t) -> np.ndarray:
        return np.where(self._h > 0, self._level + t * self._trend, np.inf)

    def _select(self, contexts):
        t = self._t + 1
        h = np.maximum(self._h, 1)
        width = self.sigma * (t - self._n + h - 1) * np.sqrt(10.0 * 4.0 * math.log(t) / h**3)
        if self.beta_cap is not None:
            width = np.minimum(width, self.beta_cap)
        return argmax_random_ties(np.where(self._h > 0, self._mean_estimate(t) + width, np.inf), self._rng)

    def _update(self, actions, feedback, contexts):
        rows = np.arange(actions.shape[0])
        n = self._n[rows, actions] + 1
        self._grow(rows, actions, n)
        p_y, p_sy = self._prefix(rows, actions, n - 1)
        slot = self._slot(rows, actions, n)
        self._pool_y[rows, slot] = p_y + feedback
        self._pool_sy[rows, slot] = p_sy + n * feedback
        self._n[rows, actions] = n
        h = np.floor(self.epsilon * n + 1e-9).astype(np.int64)
        self._h[rows, actions] = h
        ok = h > 0
        if ok.any():
            r, a, nn, hh = rows[ok], actions[ok], n[ok], h[ok].astype(float)
            (y0, sy0), (y1, sy1), (y2, sy2) = (self._prefix(r, a, nn - k * h[ok]) for k in (0, 1, 2))
            last_y, last_sy = y0 - y1, sy0 - sy1
            prev_y, prev_sy = y1 - y2, sy1 - sy2
            # Σ_last (t - l)(R(l) - R(l-h)) = t (ΣR_last - ΣR_prev) - (Σ l R_last - Σ l R_prev - h ΣR_prev)
            self._trend[r, a] = (last_y - prev_y) / hh**2
            self._level[r, a] = last_y / hh - (last_sy - prev_sy - hh * prev_y) / hh**2

    @classmethod
    def _check_examples(cls):
        return _rested_example(cls)
