"""Rested rising bandits: TI-UCB (Xia et al., WWW 2024) and the baselines its paper compares against.

Every arm's expected reward rises with the number of times *that arm* was pulled, then converges
(a fine-tuning run that gets one more step each time it is chosen). TI-UCB predicts each arm's next
reward with a least-squares line over the arm's observations since its last detected change, adds a
confidence width, and resets an arm whose two most recent ω-windows predict different futures.

The generic non-stationary baselines of the paper (Rexp3, Ser4, SW-UCB, SW-TS, SW-KL-UCB) live in
:mod:`genbandit.policies.nonstationary` and are importable from here too; they follow their own
sources, not the public code the TI-UCB paper most likely ran (that code's windows subtract the
wrong arm, its SW-TS draws Beta(N+1, F+1), its means divide by the global round and its Ser4 never
eliminates; none of this is reproduced). Policies whose
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
from ..core.validation import Interval
from ._stats import argmax_random_ties, clip01, needs_horizon_or
from .classic import KLUCB
from .nonstationary import SWKLUCB, SWTS, SWUCB, Rexp3, Ser4, rexp3_tuning  # noqa: F401  (the paper's baselines, importable from here too)

__all__ = ["TIUCB", "CalibratedTIUCB", "change_statistic_variance", "ClippedKLUCB", "Rexp3", "rexp3_tuning", "Ser4", "SWUCB", "SWTS", "SWKLUCB", "RedUCB", "trend_prediction"]


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


@register_policy("tiucb", "ti_ucb")
class TIUCB(Policy):
    """TI-UCB (Xia et al., WWW 2024, Algorithm 1): least-squares trend UCB with change detection.

    For every arm with ``n`` observations since its last reset, the index is the least-squares
    line through ``(s, X_s)``, ``s = 1..n``, evaluated at ``n + 1`` (App. A.1), plus the width
    ``conf_c * sqrt(2 ln(1/delta) / n)`` (Proposition 1, ``conf_c = 16``); untried arms first,
    ties at random. After a pull, once the arm has ``2 omega`` observations since its reset, the
    lines fitted on the windows ``w1 = [n-2ω+1, n-ω]`` and ``w2 = [n-ω+1, n]`` are both evaluated
    at ``n + 1`` (the paper's w2 coefficient predicts at ``n``, a typo: Algorithm 1 compares predictions of the next pull); when they
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
        Multiplier of the confidence width (the paper's 16, Algorithm 1 line 3; the final regret is sensitive to it).

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
        needs_horizon_or(self.delta, self.horizon, "delta", type(self).__name__)

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

    def _predictions(self) -> np.ndarray:
        """Least-squares prediction of every arm's next reward, ``(n_runs, n_arms)`` (NaN if unpulled)."""
        n = self._n.astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            pred = trend_prediction(self._sum_y, self._sum_sy, 1.0, n, n + 1.0)
        return np.where(self._n > 0, pred, np.nan)

    def _index(self) -> np.ndarray:
        """Prediction plus width for every arm, ``(n_runs, n_arms)``; ``inf`` for untried arms."""
        with np.errstate(divide="ignore", invalid="ignore"):
            index = self._predictions() + self.width_constant / np.sqrt(self._n)
        return np.where(self._n == 0, np.inf, index)

    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        return argmax_random_ties(self._index(), self._rng)

    def _change_threshold(self) -> float:
        """A change fires when the two window predictions differ by more than this (Line 10: gamma / 2)."""
        return self.gamma / 2.0

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
        fired = np.abs(first - second) > self._change_threshold()
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

    def diagnostics(self) -> dict:
        """``resets_per_run``: the change detections (Algorithm 1, line 11) of each run, all arms together."""
        return {"resets_per_run": self._resets.sum(axis=1).tolist()}

    @classmethod
    def _check_examples(cls):
        RestedRisingArms = ENVIRONMENTS.get("RestedRisingArms")

        env = RestedRisingArms(instance="two-arm", horizon=400, seed=1)
        return [(cls(n_arms=2, horizon=400, omega=5, seed=0), env), (cls(n_arms=2, delta=0.1, omega=1, conf_c=1.0, seed=0), env)]


def change_statistic_variance(omega: int) -> float:
    """Variance factor ``kappa`` of TI-UCB's change statistic: ``Var(p1 - p2) = kappa * sigma^2``.

    ``p1`` and ``p2`` are the least-squares lines on the windows ``w1`` and ``w2`` of ``omega``
    observations each, both evaluated at ``n + 1`` (TI-UCB, Algorithm 1, Line 10). A line on ``m``
    points with independent noise of variance ``sigma^2`` predicts at distance ``d`` from the
    window's centre with variance ``sigma^2 (1/m + d^2 / S_xx)``, ``S_xx = m (m^2 - 1) / 12``;
    here ``d = (3 omega + 1) / 2`` for ``w1`` and ``(omega + 1) / 2`` for ``w2``, and the two
    windows share no observation. One-point windows (``omega = 1``) predict their value: ``kappa = 2``.

    >>> change_statistic_variance(1), round(change_statistic_variance(100), 6)
    (2.0, 0.322436)
    """
    if omega == 1:
        return 2.0
    w = float(omega)
    return 2.0 / w + 3.0 * ((3.0 * w + 1.0) ** 2 + (w + 1.0) ** 2) / (w * (w * w - 1.0))


@register_policy("tiucb-calibrated", "calibrated-ti-ucb")
class CalibratedTIUCB(TIUCB):
    """TI-UCB with a change test calibrated to a false-alarm level and resets that cannot raise an index.

    Ours, not the paper's: :class:`TIUCB` (Xia et al., WWW 2024, Algorithm 1) with two changes,
    everything else (trend index, width ``conf_c * sqrt(2 ln(1/delta) / n)``, windows, the reset
    to the newest observation) as in :class:`TIUCB`.

    **Calibrated change test.** TI-UCB fires when the window predictions ``p1``, ``p2`` differ by
    more than ``gamma / 2``. On an arm whose mean is linear over the last ``2 omega`` pulls (a flat
    arm included) both are unbiased for the same value, so with independent ``sigma``-sub-Gaussian
    noise ``p1 - p2`` is sub-Gaussian with variance proxy ``kappa(omega) sigma^2``
    (:func:`change_statistic_variance`), and ``P(|p1 - p2| > h) <= 2 exp(-h^2 / (2 kappa sigma^2))``.
    The threshold ``h = sigma * sqrt(2 kappa(omega) ln(2 N / alpha))`` makes each test's
    false-alarm probability at most ``alpha / N``; a run makes at most ``N`` tests (one per round,
    on the pulled arm; ``N = n_tests``, by default the horizon), so by the union bound **a run
    raises a false alarm anywhere, on any flat or linear arm, with probability at most
    ``alpha``**. With the paper's two-arm setting (``sigma = 0.1``, ``omega = 100``, ``N =
    200,000``, ``alpha = 0.05``) ``h = 0.320``, where TI-UCB's ``gamma / 2 = 0.15`` fires with
    probability about 0.008 per test.

    **Resets capped by the whole history.** After a reset TI-UCB's index is ``X + W / sqrt(1)``: a
    false alarm on a low arm makes it the most optimistic arm for many thousands of pulls, and the
    next false alarm comes first (the trap measured in the TI-UCB reproduction). Here an arm's
    index is the smaller of the segment index (as TI-UCB) and the same index on the arm's whole
    history, as if it had never been reset. For a rested rising arm (non-decreasing and concave
    expected reward) the least-squares line over the whole history evaluated at ``n + 1`` lies on
    or above the curve, so the whole-history index is still an upper confidence bound, and a reset
    can lower an arm's index (when the recent segment predicts less) but never raise it above what
    all of its data support.

    Parameters
    ----------
    n_arms : int
    horizon : int, optional
        Sets ``delta = 1 / horizon`` and ``n_tests = horizon`` when they are not given.
    delta : float in (0, 1), optional
    omega : int, default 100
        Change-detection window (the paper's).
    conf_c : float, default 16
        Multiplier of the confidence width (the paper's Proposition 1).
    sigma : float, default 0.1
        Sub-Gaussian scale of the reward noise (the paper's synthetic problems use 0.1).
    alpha : float in (0, 1), default 0.05
        Probability of any false alarm in a run on arms that do not change.
    n_tests : int, optional
        Number of change tests the level is spread over; defaults to ``horizon``.

    Examples
    --------
    >>> from genbandit.policies.rising import CalibratedTIUCB
    >>> policy = CalibratedTIUCB(n_arms=2, horizon=200_000, seed=0)
    >>> round(policy.change_threshold, 3)
    0.32
    >>> for x in (0.1, 0.2, 0.3):
    ...     _ = policy.update(0, x)
    >>> round(float(policy._index()[0, 0] - policy.width_constant / 3 ** 0.5), 6)  # the trend line at 4
    0.4
    """

    name = "TI-UCB (calibrated)"
    _parameter_constraints = {
        "sigma": [Interval(Real, 0, None, "neither")],
        "alpha": [Interval(Real, 0, 1, "neither")],
        "n_tests": [None, Interval(Integral, 1, None, "left")],
    }

    def __init__(self, n_arms: int, horizon: int | None = None, delta: float | None = None, omega: int = 100,
                 conf_c: float = 16.0, sigma: float = 0.1, alpha: float = 0.05, n_tests: int | None = None, seed=None) -> None:
        self.n_arms = n_arms
        self.horizon = horizon
        self.delta = delta
        self.omega = omega
        self.conf_c = conf_c
        self.sigma = sigma
        self.alpha = alpha
        self.n_tests = n_tests
        self.seed = seed

    def _check_params(self) -> None:
        super()._check_params()
        needs_horizon_or(self.n_tests, self.horizon, "n_tests", type(self).__name__)

    @property
    def change_threshold(self) -> float:
        """``sigma * sqrt(2 kappa(omega) ln(2 N / alpha))``: each test's false-alarm probability is at most ``alpha / N``."""
        n_tests = self.n_tests if self.n_tests is not None else self.horizon
        return self.sigma * math.sqrt(2.0 * change_statistic_variance(self.omega) * math.log(2.0 * n_tests / self.alpha))

    def _change_threshold(self) -> float:
        return self.change_threshold

    def _init_state(self, n_runs: int) -> None:
        super()._init_state(n_runs)
        self._pulls = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        self._history_y = np.zeros((n_runs, self.n_arms))
        self._history_sy = np.zeros((n_runs, self.n_arms))

    def _index(self) -> np.ndarray:
        pulls = self._pulls.astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            whole = trend_prediction(self._history_y, self._history_sy, 1.0, pulls, pulls + 1.0) + self.width_constant / np.sqrt(pulls)
        return np.minimum(super()._index(), np.where(self._pulls == 0, np.inf, whole))

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray | None) -> None:
        rows = np.arange(actions.shape[0])
        pulls = self._pulls[rows, actions] + 1
        self._pulls[rows, actions] = pulls
        self._history_y[rows, actions] += feedback
        self._history_sy[rows, actions] += pulls * feedback
        super()._update(actions, feedback, contexts)

    @classmethod
    def _check_examples(cls):
        env = ENVIRONMENTS.get("RestedRisingArms")(instance="two-arm", horizon=400, seed=1)
        return [(cls(n_arms=2, horizon=400, omega=5, seed=0), env), (cls(n_arms=2, delta=0.1, n_tests=50, omega=1, alpha=0.5, seed=0), env)]


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
        super()._update(actions, clip01(feedback), contexts)

    @classmethod
    def _check_examples(cls):
        return _rested_example(cls)


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
