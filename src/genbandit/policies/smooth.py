"""Smooth non-stationary bandits: Budgeted Exploration and the baselines it is compared with.

Jia, Xie, Kallus & Frazier, "Smooth Non-Stationary Bandits" (arXiv 2301.12366, ICML 2023).
Mean rewards drift along Hölder-smooth curves ``r_a(t) = mu_a(t / T)`` (``beta = 1``: Lipschitz;
``beta = 2``: Lipschitz derivative). Budgeted Exploration BE(B, Delta) splits the horizon into
epochs of ``Delta * T`` rounds, forgets everything at each epoch start, and spends at most a budget
``B`` of cumulative reward on arms that look worse; the smoothness order enters only through the
tuning of (B, Delta).

Every class is an ordinary :class:`~genbandit.core.base.Policy` (plain Python, one run or many).
Against the environments of :mod:`genbandit.envs.smooth`, :func:`genbandit.simulate` plays them through
their compiled loop (:mod:`genbandit.policies._smooth_numba`, numba; horizons up to 10^8 rounds), which
agrees with the plain loop round for round (``tests/test_smooth.py``).

Rounds are 1-based; epoch ``i`` covers rounds ``((i-1) n, i n]`` with ``n = round(Delta T)``, the last
epoch truncated at ``T`` (Algorithms 1 and 2). ``log`` is the natural log.
"""

from __future__ import annotations

import math
from typing import Any
from numbers import Integral, Real

import numpy as np

from ..core.base import Policy
from ..core.registry import ENVIRONMENTS, register_policy
from ..core.validation import ArrayOf, Interval, InvalidParameterError, Options
from .nonstationary import SWUCB, Rexp3, _bernoulli_example

__all__ = [
    "be_ns_tuning",
    "be_s_tuning",
    "window_for",
    "BudgetedExploration",
    "BENS",
    "BES",
    "SmoothRexp3",
    "SmoothSWUCB",
    "SmoothDUCB",
]

_POSITIVE = Interval(Real, 0, None, "neither")
_HORIZON = [Interval(Integral, 1, None, "left")]


# --------------------------------------------------------------------------------------- tunings
def _epoch_rounds(delta: float, horizon: int) -> int:
    """Epoch length in rounds: ``round(Delta T)`` clipped to [1, T] (Algorithms 1 and 2: epochs of ``Delta T`` rounds)."""
    return int(min(max(round(min(delta, 1.0) * horizon), 1), horizon))


def be_ns_tuning(horizon: int, L: float = 1.0) -> tuple[float, float]:
    """(Delta, B) of BE-NS, beta = 1 (paper Thm 5.2 / Prop 5.1).

    ``Delta = L^(-2/3) T^(-1/3) log^(1/3) T`` and ``B = L^(-1/3) T^(1/3) log^(2/3) T``.

    >>> d, b = be_ns_tuning(10**6)
    >>> round(d, 4), round(b, 1), round(d * 10**6)
    (0.024, 575.8, 23995)
    """
    T, lt = float(horizon), math.log(horizon)
    return L ** (-2 / 3) * T ** (-1 / 3) * lt ** (1 / 3), L ** (-1 / 3) * T ** (1 / 3) * lt ** (2 / 3)


def be_s_tuning(horizon: int, L: float = 1.0, n_arms: int | None = None) -> tuple[float, float]:
    """(Delta, B) of BE-S, beta = 2: one-armed (Thm 5.4) or, with ``n_arms``, k-armed (Thm 6.2).

    One-armed: ``Delta = L^(-2/5) T^(-1/5) log^(1/5) T``, ``B = L^(-1/5) T^(2/5) log^(3/5) T`` (the
    paper's §7.3 budget ``T^(3/5) log^(4/5) T`` is a typo: it contradicts Thm 5.4's tuning). k-armed:
    ``Delta = L^(-2/5) k^(-3/5) T^(-1/5) (log T log k)^(1/5)``,
    ``B = L^(-1/5) sqrt(Delta T log T log k / k)``.

    >>> d, b = be_s_tuning(10**6)
    >>> round(d, 4), round(b, 1)
    (0.1067, 1214.0)
    >>> d, b = be_s_tuning(10**6, n_arms=2)
    >>> round(d, 4), round(b, 1)
    (0.0654, 559.6)
    """
    T, lt = float(horizon), math.log(horizon)
    if n_arms is None:
        return L ** (-2 / 5) * T ** (-1 / 5) * lt ** (1 / 5), L ** (-1 / 5) * T ** (2 / 5) * lt ** (3 / 5)
    k = float(n_arms)
    lk = math.log(k)
    delta = L ** (-2 / 5) * k ** (-3 / 5) * T ** (-1 / 5) * (lt * lk) ** (1 / 5)
    return delta, L ** (-1 / 5) * math.sqrt(delta * T * lt * lk / k)


def window_for(horizon: int, L: float = 1.0) -> int:
    """Window of SW-UCB / memory of D-UCB for Lipschitz drift (our choice; the paper runs neither).

    A window of ``tau`` rounds averages means that drift by up to ``L tau / T``; its noise is about
    ``sqrt(2 log T / tau)``. Balancing the two gives ``tau = (T sqrt(2 log T) / L)^(2/3)``.

    >>> window_for(10**6)
    30232
    """
    tau = (horizon * math.sqrt(2.0 * math.log(max(horizon, 2))) / L) ** (2 / 3)
    return int(min(max(math.ceil(tau), 1), horizon))


class _CompiledLoop:
    """Policies with a compiled loop against the smooth environments (those with ``kernel_spec``).

    Each such policy says what the loop needs of its settings through ``compiled_kernel()``:
    ``(loop kind, constants, static mean or None)``.
    """

    def compiled_loop(self, env):
        """The compiled loop :func:`genbandit.simulate` runs for this policy on ``env``, or ``None``."""
        if not hasattr(env, "kernel_spec"):
            return None
        from ._smooth_numba import run_loop

        return run_loop

# --------------------------------------------------------------------------------------- BE
@register_policy("be", "budgeted-exploration")
class BudgetedExploration(_CompiledLoop, Policy):
    """Budgeted Exploration BE(B, Delta), Algorithms 1 and 2 of Jia et al. (2023), runnable form.

    k-armed (Algorithm 2): in each epoch, play the alive arms round robin (ascending index); after
    every full pass, eliminate each alive arm whose epoch reward sum is below the leader's by more
    than ``budget`` (strict). Once one arm is alive, or a full pass no longer fits in the epoch,
    play the leader (highest sum, lowest index on ties) to the epoch's end. Everything resets at
    the next epoch.

    One-armed (Algorithm 1, ``one_armed=True``, two arms): arm 0 is static with known mean
    ``static_mean`` (a float, or one value per run), arm 1 drifts. Play arm 1 while its epoch sum of
    ``reward - static_mean`` stays at or above ``-budget``, then arm 0 until the epoch ends.

    An ``update`` with an arm other than the one BE asked for advances time but does not count.

    Parameters
    ----------
    n_arms, horizon : int
    budget : float
        Exploration budget B.
    epoch_length : int
        Epoch length in rounds, ``Delta * T``.
    one_armed : bool
    static_mean : float or array of shape (n_runs,)

    >>> from genbandit.policies.smooth import BudgetedExploration
    >>> be = BudgetedExploration(n_arms=2, horizon=8, budget=1.5, epoch_length=4, one_armed=True)
    >>> arms = []
    >>> for y in [-1, -1, 1, 1, -1, 1, 1, 1]:
    ...     a = be.select(); arms.append(a); _ = be.update(a, y)
    >>> arms  # sum -2 < -1.5 after round 2: static arm to the end of epoch 1, fresh epoch at round 5
    [1, 1, 0, 0, 1, 1, 1, 1]
    """

    name = "BE"
    _parameter_constraints = {
        "horizon": _HORIZON,
        "budget": [_POSITIVE],
        "epoch_length": [Interval(Integral, 1, None, "left")],
        "one_armed": [bool],
        "static_mean": [Interval(Real, None, None), ArrayOf(Interval(Real, None, None))],
    }

    def __init__(self, n_arms: int, horizon: int, budget: float, epoch_length: int, one_armed: bool = False, static_mean=0.0, seed=None) -> None:
        self.n_arms = n_arms
        self.horizon = horizon
        self.budget = budget
        self.epoch_length = epoch_length
        self.one_armed = one_armed
        self.static_mean = static_mean
        self.seed = seed

    # tuned subclasses compute (B, n) from their own parameters
    def _budget_epoch(self) -> tuple[float, int]:
        return float(self.budget), int(min(self.epoch_length, self.horizon))

    def _check_params(self) -> None:
        if self.one_armed and self.n_arms != 2:
            raise InvalidParameterError(f"The one-armed {type(self).__name__} needs n_arms=2 (arm 0 static). Got n_arms={self.n_arms} instead.")

    def _init_state(self, n_runs: int) -> None:
        b, n = self._budget_epoch()
        self._B, self._n = b, n
        try:
            self._c = np.broadcast_to(np.asarray(self.static_mean, dtype=float), (n_runs,)).copy()
        except ValueError as exc:
            raise InvalidParameterError(f"static_mean must be a float or hold one value per run ({n_runs}). Got {self.static_mean!r}.") from exc
        self._z = np.zeros((n_runs, self.n_arms))
        self._alive = np.ones((n_runs, self.n_arms), dtype=bool)
        self._pass_pos = np.zeros(n_runs, dtype=np.int64)
        self._exploit = np.full(n_runs, -1, dtype=np.int64)

    def compiled_kernel(self) -> tuple[str, np.ndarray, Any]:
        return ("be-one" if self.one_armed else "be-k"), np.array([self.budget_, float(self.epoch_length_)]), self.static_mean

    @property
    def budget_(self) -> float:
        """The budget B in use (after any tuning)."""
        return self._budget_epoch()[0]

    @property
    def epoch_length_(self) -> int:
        """The epoch length in rounds in use (after any tuning)."""
        return self._budget_epoch()[1]

    def _epoch_end(self, t: int) -> int:
        return min(self.horizon, ((t - 1) // self._n + 1) * self._n)

    def _pass_arm(self, r: int) -> int:
        return int(np.flatnonzero(self._alive[r])[self._pass_pos[r]])

    def _leader(self, r: int) -> int:
        alive = np.flatnonzero(self._alive[r])
        return int(alive[np.argmax(self._z[r, alive])])

    def _pass_fits(self, r: int, t: int) -> bool:
        n_alive = int(self._alive[r].sum())
        return n_alive >= 2 and t + n_alive - 1 <= self._epoch_end(t)

    def _select(self, contexts) -> np.ndarray:
        t = self._t + 1
        out = np.empty(self._n_runs, dtype=np.int64)
        for r in range(self._n_runs):
            if self.one_armed:
                out[r] = 1 if self._exploit[r] < 0 else 0
            elif self._exploit[r] >= 0:
                out[r] = self._exploit[r]
            elif self._pass_pos[r] == 0 and not self._pass_fits(r, t):
                out[r] = self._leader(r)
            else:
                out[r] = self._pass_arm(r)
        return out

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts) -> None:
        t = self._t + 1
        for r in range(self._n_runs):
            a, y = int(actions[r]), float(feedback[r])
            if self.one_armed:
                if self._exploit[r] < 0 and a == 1:
                    self._z[r, 1] += y - self._c[r]
                    if self._z[r, 1] < -self._B:
                        self._exploit[r] = 0
            elif self._exploit[r] < 0:
                if self._pass_pos[r] == 0 and not self._pass_fits(r, t):
                    self._exploit[r] = self._leader(r)
                elif a == self._pass_arm(r):
                    self._z[r, a] += y
                    self._pass_pos[r] += 1
                    if self._pass_pos[r] == self._alive[r].sum():
                        alive = self._alive[r]
                        zmax = self._z[r, alive].max()
                        alive &= ~(self._z[r] < zmax - self._B)
                        self._pass_pos[r] = 0
            if t == self._epoch_end(t):
                self._z[r] = 0.0
                self._alive[r] = True
                self._pass_pos[r] = 0
                self._exploit[r] = -1

    @classmethod
    def _check_examples(cls):
        SinusoidArms = ENVIRONMENTS.get("SinusoidArms")
        BernoulliArms = ENVIRONMENTS.get("BernoulliArms")

        return [
            (cls(n_arms=3, horizon=300, budget=3.0, epoch_length=60, seed=0), BernoulliArms(means=[0.2, 0.5, 0.7], seed=1)),
            (cls(n_arms=2, horizon=300, budget=3.0, epoch_length=60, one_armed=True, static_mean=0.2, seed=0), SinusoidArms(horizon=300, amplitude_scale=0.2 * 6.25, amplitude_sd=0.0, nu_range=(2.5, 2.5), seed=1)),
        ]


class _TunedBE(BudgetedExploration):
    """BE whose (B, Delta) come from the paper's formulas in T, k and the Hölder constant L."""

    _parameter_constraints = {
        "horizon": _HORIZON,
        "L": [_POSITIVE],
        "budget_const": [_POSITIVE],
        "sigma": [_POSITIVE],
        "one_armed": [bool],
        "static_mean": [Interval(Real, None, None), ArrayOf(Interval(Real, None, None))],
    }

    def _delta_budget(self) -> tuple[float, float]:
        raise NotImplementedError

    def _budget_epoch(self) -> tuple[float, int]:
        delta, b = self._delta_budget()
        return b * self.budget_const * self.sigma, _epoch_rounds(delta, self.horizon)

    @property
    def delta_(self) -> float:
        """The normalised epoch size Delta of the formula (before rounding to whole rounds)."""
        return self._delta_budget()[0]

    @classmethod
    def _check_examples(cls):
        SinusoidArms = ENVIRONMENTS.get("SinusoidArms")
        BernoulliArms = ENVIRONMENTS.get("BernoulliArms")

        return [
            (cls(n_arms=3, horizon=300, seed=0), BernoulliArms(means=[0.2, 0.5, 0.7], seed=1)),
            (cls(n_arms=2, horizon=300, one_armed=True, static_mean=0.2, seed=0), SinusoidArms(horizon=300, amplitude_scale=0.2 * 6.25, amplitude_sd=0.0, nu_range=(2.5, 2.5), seed=1)),
        ]


@register_policy("be-ns", "bens")
class BENS(_TunedBE):
    """BE-NS: Budgeted Exploration tuned for beta = 1 (Jia et al. 2023, Thm 5.2).

    ``Delta = L^(-2/3) T^(-1/3) log^(1/3) T``, ``B = budget_const * sigma * L^(-1/3) T^(1/3) log^(2/3) T``
    (see :func:`be_ns_tuning`); regret O(L^(1/3) T^(2/3) log^(1/3) T). ``budget_const`` (default 1,
    the paper's literal tuning) scales B: the proofs want ``B^2 >= 6 Delta T log T``, which needs
    ``sqrt(6)`` (the proofs of Thms 5.2 and 5.4). ``sigma`` scales B for rewards of scale other than 1 (the budget is in reward units).

    >>> from genbandit.policies.smooth import BENS
    >>> p = BENS(n_arms=2, horizon=10**6, one_armed=True)
    >>> p.epoch_length_, round(p.budget_, 1)
    (23995, 575.8)
    """

    name = "BE-NS"

    def __init__(self, n_arms: int, horizon: int, L: float = 1.0, budget_const: float = 1.0, sigma: float = 1.0, one_armed: bool = False, static_mean=0.0, seed=None) -> None:
        self.n_arms = n_arms
        self.horizon = horizon
        self.L = L
        self.budget_const = budget_const
        self.sigma = sigma
        self.one_armed = one_armed
        self.static_mean = static_mean
        self.seed = seed

    def _delta_budget(self) -> tuple[float, float]:
        return be_ns_tuning(self.horizon, self.L)


@register_policy("be-s", "bes")
class BES(_TunedBE):
    """BE-S: Budgeted Exploration tuned for beta = 2 (Jia et al. 2023, Thm 5.4; k-armed Thm 6.2).

    ``tuning="one-armed"`` uses Thm 5.4's ``Delta = L^(-2/5) T^(-1/5) log^(1/5) T``,
    ``B = L^(-1/5) T^(2/5) log^(3/5) T`` (what the paper's experiments use, even with k = 20);
    ``tuning="k-armed"`` uses Thm 6.2's k-aware formulas (:func:`be_s_tuning` with ``n_arms``);
    ``"auto"`` picks one-armed for the one-armed algorithm and k-armed otherwise. B is multiplied
    by ``budget_const * sigma`` as in :class:`BENS`. Regret O(L^(1/5) T^(3/5) log^(2/5) T).

    >>> from genbandit.policies.smooth import BES
    >>> p = BES(n_arms=2, horizon=10**6, one_armed=True)
    >>> p.epoch_length_, round(p.budget_, 1)
    (106678, 1214.0)
    >>> BES(n_arms=20, horizon=10**6, tuning="k-armed").epoch_length_
    22017
    """

    name = "BE-S"
    _parameter_constraints = {"tuning": [Options(("auto", "one-armed", "k-armed"))]}

    def __init__(
        self, n_arms: int, horizon: int, L: float = 1.0, tuning: str = "auto", budget_const: float = 1.0, sigma: float = 1.0, one_armed: bool = False, static_mean=0.0, seed=None
    ) -> None:
        self.n_arms = n_arms
        self.horizon = horizon
        self.L = L
        self.tuning = tuning
        self.budget_const = budget_const
        self.sigma = sigma
        self.one_armed = one_armed
        self.static_mean = static_mean
        self.seed = seed

    def _delta_budget(self) -> tuple[float, float]:
        k_aware = self.tuning == "k-armed" or (self.tuning == "auto" and not self.one_armed)
        return be_s_tuning(self.horizon, self.L, self.n_arms if k_aware and self.n_arms > 1 else None)


# --------------------------------------------------------------------------------------- Rexp3
@register_policy("smooth-rexp3")
class SmoothRexp3(_CompiledLoop, Rexp3):
    """Rexp3 (Besbes, Gur & Zeevi 2014) as Jia et al. (2023) §7 set it: ``V_T = 0.05``, the batch as printed.

    The algorithm is :class:`~genbandit.policies.nonstationary.Rexp3`; only the defaults differ: the batch
    ``ceil(k ln^(1/3) k (T/V)^(2/3))`` as the paper prints it (``batch_form="besbes"`` for Besbes et
    al.'s ``(k ln k)^(1/3)``), capped at T, and ``variation_budget = 0.05``.

    >>> from genbandit.policies.smooth import SmoothRexp3
    >>> p = SmoothRexp3(n_arms=2, horizon=1000, seed=0)
    >>> p.batch_, p.probabilities().tolist()
    (1000, [0.5, 0.5])
    """

    name = "Rexp3 (smooth)"

    def __init__(self, n_arms: int, horizon: int, variation_budget: float = 0.05, batch_form: str = "printed",
                 reward_min: float = 0.0, reward_max: float = 1.0, seed=None) -> None:
        super().__init__(n_arms, horizon, variation_budget=variation_budget, batch_form=batch_form, reward_min=reward_min,
                         reward_max=reward_max, seed=seed)

    def draw_uniforms(self, n_rounds: int) -> np.ndarray:
        """The uniforms the next ``n_rounds`` draws take from this policy's generator, ``(n_runs, n_rounds)`` (for the compiled loop)."""
        return self._rng.random((n_rounds, self._n_runs)).T

    def compiled_kernel(self) -> tuple[str, np.ndarray, Any]:
        return "rexp3", np.array([self.gamma_, float(self.batch_), float(self.reward_min), float(self.reward_max)]), None

    @classmethod
    def _check_examples(cls):
        return _bernoulli_example(cls, horizon=200)


# --------------------------------------------------------------------------------------- UCB additions
@register_policy("smooth-sw-ucb")
class SmoothSWUCB(_CompiledLoop, SWUCB):
    """Sliding-window UCB (Garivier & Moulines 2011, sec. 4): an ADDITION, the paper runs no UCB.

    The algorithm and its ring buffer are :class:`~genbandit.policies.nonstationary.SWUCB`; this setting
    takes ``tau = window`` or :func:`window_for` (T, L), reads ``t`` in ``log(min(t, tau))`` as the
    current round, and breaks ties (unseen arms first) by the lowest index, so that it draws no
    random numbers and its compiled loop in ``_smooth_numba`` follows it round for round.

    >>> from genbandit.policies.smooth import SmoothSWUCB
    >>> p = SmoothSWUCB(n_arms=2, horizon=100, window=3)
    >>> arms = []
    >>> for y in [1.0, 0.0, 0.0, 1.0]:
    ...     a = p.select(); arms.append(a); _ = p.update(a, y)
    >>> arms  # arm 0 (mean 1) is played after both tries; the window of 3 keeps rounds 2-4
    [0, 1, 0, 0]
    """

    name = "SW-UCB (smooth)"
    _parameter_constraints = {"horizon": _HORIZON, "L": [_POSITIVE]}

    def __init__(self, n_arms: int, horizon: int, window: int | None = None, L: float = 1.0, xi: float = 0.6,
                 scale: float = 1.0, seed=None) -> None:
        super().__init__(n_arms, horizon, window=window, xi=xi, scale=scale, seed=seed)
        self.L = L

    def _default_window(self) -> int:
        return window_for(self.horizon, self.L)

    @property
    def window_(self) -> int:
        return self._window()

    def compiled_kernel(self) -> tuple[str, np.ndarray, Any]:
        return "sw-ucb", np.array([float(self.window_), float(self.xi), float(self.scale)]), None

    def _select(self, contexts) -> np.ndarray:
        counts = self._w_counts
        unseen = counts == 0
        log_t = math.log(min(self._t + 1, self._window()))
        n = np.where(unseen, 1, counts)
        index = self._w_sums / n + self.scale * np.sqrt(self.xi * log_t / n)
        return np.where(unseen.any(axis=1), unseen.argmax(axis=1), index.argmax(axis=1))

    @classmethod
    def _check_examples(cls):
        return _bernoulli_example(cls, horizon=200)


@register_policy("smooth-d-ucb")
class SmoothDUCB(_CompiledLoop, Policy):
    """Discounted UCB (Garivier & Moulines 2011, Alg. D-UCB): an ADDITION, the paper runs no UCB.

    Counts and sums decay by ``g`` each round; index ``S_a / N_a + 2 scale sqrt(xi log(n) / N_a)``
    with ``n = sum_a N_a``; arms never played first (lowest index). ``g = discount`` or
    ``1 - 1 / window_for(T, L)`` (the same memory as :class:`SmoothSWUCB`).

    >>> from genbandit.policies.smooth import SmoothDUCB
    >>> p = SmoothDUCB(n_arms=2, horizon=100, discount=0.5)
    >>> for a, y in [(0, 1.0), (1, 0.0)]:
    ...     _ = p.update(a, y)
    >>> p.select()
    0
    """

    name = "D-UCB (smooth)"
    _parameter_constraints = {
        "horizon": _HORIZON,
        "discount": [None, Interval(Real, 0, 1, "neither")],
        "L": [_POSITIVE],
        "xi": [_POSITIVE],
        "scale": [_POSITIVE],
    }

    def __init__(self, n_arms: int, horizon: int, discount: float | None = None, L: float = 1.0, xi: float = 0.6, scale: float = 1.0, seed=None) -> None:
        self.n_arms = n_arms
        self.horizon = horizon
        self.discount = discount
        self.L = L
        self.xi = xi
        self.scale = scale
        self.seed = seed

    @property
    def discount_(self) -> float:
        return float(self.discount) if self.discount is not None else 1.0 - 1.0 / max(window_for(self.horizon, self.L), 2)

    def compiled_kernel(self) -> tuple[str, np.ndarray, Any]:
        return "d-ucb", np.array([self.discount_, float(self.xi), float(self.scale)]), None

    def _init_state(self, n_runs: int) -> None:
        self._g = self.discount_
        self._n = np.zeros((n_runs, self.n_arms))
        self._s = np.zeros((n_runs, self.n_arms))

    def _select(self, contexts) -> np.ndarray:
        unseen = self._n == 0
        n = np.where(unseen, 1.0, self._n)
        total = np.maximum(self._n.sum(axis=1, keepdims=True), 1.0)
        index = self._s / n + 2.0 * self.scale * np.sqrt(self.xi * np.log(total) / n)
        return np.where(unseen.any(axis=1), unseen.argmax(axis=1), index.argmax(axis=1))

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts) -> None:
        rows = np.arange(self._n_runs)
        self._n *= self._g
        self._s *= self._g
        self._n[rows, actions] += 1.0
        self._s[rows, actions] += feedback

    @classmethod
    def _check_examples(cls):
        return _bernoulli_example(cls, horizon=200)
