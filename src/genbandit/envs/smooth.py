"""Smoothly drifting arms (Jia et al. 2023, §7): sinusoids, a click-log stand-in, real OBD click logs.

Every environment here has mean rewards ``r_a(t) = mu_a(t / T)`` for a known horizon ``T`` and
rounds ``t = 1..T``, Rademacher (``+1`` w.p. ``(1 + r)/2``, else ``-1``) or Bernoulli(``r``) rewards,
and reports the pseudo-regret ``max_a r_a(t) - r_{A_t}(t)``. One uniform per run and round decides the
reward (``reward = u < threshold``), so the compiled loops of
:mod:`genbandit.policies._smooth_numba` replay the very same draws.

Two kinds of mean functions:

* ``SinusoidArms`` (paper §7.2): ``r_0 = A``, ``r_1(t) = A - A sin(2 pi nu t / T + phi)`` per run.
* ``ClickCurveArms`` and its two builders: per-arm curves on a grid of ``G`` points over [0, 1],
  read by linear interpolation at ``x = t / T``. ``CTRStandIn`` generates a day of clicks and smooths
  it (the paper's §7.4 setting); ``OBDClickCurves`` smooths the real Open Bandit Dataset sample bundled with
  ``obp`` (see :func:`obd_click_log` and :func:`smooth_click_rates`).
"""

from __future__ import annotations

import functools
from numbers import Integral, Real

import numpy as np

from ..core.base import Environment, Step
from ..core.optional import import_optional
from ..core.registry import register_environment
from ..core.validation import ArrayOf, Interval, InvalidParameterError, Options

__all__ = [
    "SinusoidArms",
    "ClickCurveArms",
    "CTRStandIn",
    "OBDClickCurves",
    "obd_click_log",
    "smooth_click_rates",
    "ctr_standin_curves",
    "holder_constants",
]

NOISES = ("rademacher", "bernoulli")


def holder_constants(grid: np.ndarray) -> tuple[float, float]:
    """(sup |mu'|, sup |mu''|) of curves sampled on a uniform grid over [0, 1] (finite differences).

    >>> x = np.linspace(0, 1, 2001)
    >>> l1, l2 = holder_constants(np.sin(2 * np.pi * x)[None])
    >>> round(l1, 2), round(l2, 1)
    (6.28, 39.5)
    """
    grid = np.atleast_2d(np.asarray(grid, dtype=float))
    h = 1.0 / (grid.shape[-1] - 1)
    d1 = np.diff(grid, axis=-1) / h
    d2 = np.diff(grid, n=2, axis=-1) / h**2
    return float(np.abs(d1).max()), float(np.abs(d2).max())


class _SmoothArms(Environment):
    """Shared step: one uniform per run and round, Rademacher or Bernoulli rewards, pseudo-regret."""

    horizon: int
    noise: str

    def _means_at(self, t: int) -> np.ndarray:
        """Mean rewards ``(n_runs, n_arms)`` at round ``t`` (1-based)."""
        raise NotImplementedError

    def mean_rewards(self) -> np.ndarray:
        return self._means_at(self._t + 1)

    def _step(self, actions: np.ndarray) -> Step:
        means = self._means_at(self._t + 1)
        rows = np.arange(self._n_runs)
        chosen = means[rows, actions]
        u = self._rng.random(self._n_runs)
        if self.noise == "rademacher":
            reward = np.where(u < 0.5 * (1.0 + chosen), 1.0, -1.0)
        else:
            reward = np.where(u < chosen, 1.0, 0.0)
        best = means.max(axis=1)
        return Step(feedback=reward, reward=reward, regret=best - chosen, info={"optimal": (chosen == best).astype(float)})

    @property
    def max_horizon(self) -> int:  # rounds beyond T have no mean
        return int(self.horizon)

    def kernel_spec(self) -> tuple[int, np.ndarray, np.ndarray]:
        """(kind, params ``(n_runs, 3)``, grid ``(g, n_arms, G)``) for the compiled loops."""
        raise NotImplementedError

    def policy_arguments(self) -> dict:
        """Constructor arguments a policy may take from this environment (after ``reset``).

        ``L1``/``L2``: the Hölder constants sup |mu'| and sup |mu''| (a policy parameter ``L = "L1"``
        takes the value); ``static_mean``: the static arm's mean per run (the one-armed BE, where the
        environment has a static arm); ``reward_min``/``reward_max``: the reward range of the noise;
        ``scale``: the UCB bonus scale for that range.
        """
        l1, l2 = self.holder_constants()
        rademacher = self.noise == "rademacher"
        offered = {"L1": l1, "L2": l2, "reward_min": -1.0 if rademacher else 0.0, "reward_max": 1.0, "scale": 2.0 if rademacher else 1.0}
        if hasattr(self, "static_means"):
            offered["static_mean"] = self.static_means()
        return offered

    def diagnostics(self) -> dict:
        """Facts a report reads beside the regret: the Hölder constants (sup |mu'|, sup |mu''|)."""
        return {"holder_constants": list(self.holder_constants())}

    def draw_uniforms(self, n_rounds: int) -> np.ndarray:
        """The uniforms the next ``n_rounds`` rounds' rewards use, ``(n_runs, n_rounds)`` (for the compiled loops)."""
        return self._rng.random((n_rounds, self._n_runs)).T


@register_environment("sinusoid-arms")
class SinusoidArms(_SmoothArms):
    """Jia et al. (2023) §7.2 sinusoid instances: ``r_0 = A``, ``r_1(t) = A - A sin(2 pi nu t/T + phi)``.

    Per run: ``nu ~ U[nu_range]``, ``A ~ N(amplitude_scale nu^-2, amplitude_sd)`` (s.d., as the paper's §7.2 means it),
    ``phi ~ U[0, 2 pi)``. The paper's instance is ``amplitude_scale=0.25, amplitude_sd=0.001``; the
    slope-check instance (10x amplitude) is ``amplitude_scale=2.5, amplitude_sd=0.01``. A is
    clipped to [0, 0.5] so the means stay valid for both noises. Arm 0 is the static arm; its mean
    per run is :meth:`static_means` (what the one-armed BE is told).

    Hölder constants of the family (A at its centre): ``L1 = 2 pi amplitude_scale / nu_min``,
    ``L2 = amplitude_scale (2 pi)^2`` (:meth:`holder_constants`).

    >>> env = SinusoidArms(horizon=1000, amplitude_scale=2.5, amplitude_sd=0.01, seed=0).reset(n_runs=2)
    >>> env.static_means().round(3).tolist(), [round(c, 1) for c in env.holder_constants()]
    ([0.156, 0.249], [6.3, 98.7])
    """

    name = "sinusoid"
    _parameter_constraints = {
        "horizon": [Interval(Integral, 1, None, "left")],
        "nu_range": [ArrayOf(Interval(Real, 0, None, "neither"))],
        "amplitude_scale": [Interval(Real, 0, None, "neither")],
        "amplitude_sd": [Interval(Real, 0, None, "left")],
        "noise": [Options(NOISES)],
    }

    def __init__(self, horizon: int, nu_range=(2.5, 5.0), amplitude_scale: float = 0.25, amplitude_sd: float = 0.001, noise: str = "rademacher", seed=None) -> None:
        self.horizon = horizon
        self.nu_range = nu_range
        self.amplitude_scale = amplitude_scale
        self.amplitude_sd = amplitude_sd
        self.noise = noise
        self.seed = seed

    n_arms = 2

    def _check_params(self) -> None:
        if len(self.nu_range) != 2 or self.nu_range[0] > self.nu_range[1]:
            raise InvalidParameterError(f"nu_range must be (low, high) with low <= high. Got {self.nu_range!r} instead.")

    def _init_state(self, n_runs: int) -> None:
        lo, hi = (float(v) for v in self.nu_range)
        nu = self._rng.uniform(lo, hi, n_runs)
        amp = np.clip(self._rng.normal(self.amplitude_scale / nu**2, self.amplitude_sd), 0.0, 0.5)
        phi = self._rng.uniform(0.0, 2.0 * np.pi, n_runs)
        self._params = np.stack([nu, amp, phi], axis=1)

    def static_means(self) -> np.ndarray:
        """The static arm's mean A per run ``(n_runs,)``."""
        return self._params[:, 1].copy()

    def holder_constants(self) -> tuple[float, float]:
        return 2 * np.pi * self.amplitude_scale / float(self.nu_range[0]), self.amplitude_scale * (2 * np.pi) ** 2

    def _means_at(self, t: int) -> np.ndarray:
        nu, amp, phi = self._params.T
        r1 = amp - amp * np.sin(2.0 * np.pi * nu * (t / self.horizon) + phi)
        return np.stack([amp, r1], axis=1)

    def kernel_spec(self):
        return 0, self._params.copy(), np.zeros((1, 2, 2))

    @classmethod
    def _check_examples(cls):
        return [cls(horizon=500, seed=0), cls(horizon=500, amplitude_scale=2.5, amplitude_sd=0.01, noise="bernoulli", seed=1)]


@register_environment("click-curves")
class ClickCurveArms(_SmoothArms):
    """Arms whose means follow given curves ``grid[a]`` on a uniform grid over [0, 1] (replay).

    ``r_a(t)`` is the linear interpolation of ``grid[a]`` at ``x = t / T``; Bernoulli rewards by
    default. ``amplify`` (optional, a labelled deviation) maps ``m -> clip(0.5 + amplify (m - mbar),
    0.02, 0.98)`` with ``mbar`` the mean over arms and time, widening click-rate gaps (§7.4).

    >>> env = ClickCurveArms(grid=[[0.1, 0.3], [0.2, 0.2]], horizon=4, seed=0).reset()
    >>> env.mean_rewards().round(3).tolist()
    [[0.15, 0.2]]
    """

    name = "click-curves"
    _parameter_constraints = {
        "horizon": [Interval(Integral, 1, None, "left")],
        "noise": [Options(NOISES)],
        "amplify": [None, Interval(Real, 0, None, "neither")],
    }

    def __init__(self, grid, horizon: int, noise: str = "bernoulli", amplify: float | None = None, seed=None) -> None:
        self.grid = grid
        self.horizon = horizon
        self.noise = noise
        self.amplify = amplify
        self.seed = seed

    def _check_params(self) -> None:
        g = np.asarray(self.grid, dtype=float)
        if g.ndim != 2 or g.shape[1] < 2 or not np.all(np.isfinite(g)):
            raise InvalidParameterError(f"grid must be a finite (n_arms, G >= 2) array. Got shape {g.shape}.")
        lo = -1.0 if self.noise == "rademacher" else 0.0
        if self.amplify is None and (g.min() < lo or g.max() > 1.0):
            raise InvalidParameterError(f"grid values must lie in [{lo}, 1] for {self.noise} rewards.")

    @property
    def n_arms(self) -> int:
        return self.curves().shape[0]

    def curves(self) -> np.ndarray:
        """The mean curves in use ``(n_arms, G)`` (after ``amplify``)."""
        g = np.asarray(self.grid, dtype=float)
        if self.amplify is not None:
            g = np.clip(0.5 + self.amplify * (g - g.mean()), 0.02, 0.98)
        return g

    def holder_constants(self) -> tuple[float, float]:
        return holder_constants(self.curves())

    def _init_state(self, n_runs: int) -> None:
        self._grid = self.curves()[None]

    def _means_at(self, t: int) -> np.ndarray:
        g = self._grid[0]
        pos = (t / self.horizon) * (g.shape[1] - 1)
        i = min(int(pos), g.shape[1] - 2)
        w = pos - i
        m = g[:, i] * (1.0 - w) + g[:, i + 1] * w
        return np.broadcast_to(m, (self._n_runs, m.size)).copy()

    def kernel_spec(self):
        return 1, np.zeros((self._n_runs, 3)), self._grid.copy()

    @classmethod
    def _check_examples(cls):
        return [cls(grid=[[0.1, 0.5, 0.2], [0.4, 0.2, 0.6]], horizon=300, seed=0)]


# --------------------------------------------------------------------------------------- smoothing
def smooth_click_rates(times, clicks, grid_x, bandwidth: float, prior_rate=None, prior_strength: float = 0.0, kernel: str = "gaussian", degree: int = 1) -> np.ndarray:
    """Local-linear click rate of events (``times`` in [0, 1], 0/1 ``clicks``) on ``grid_x``.

    At each grid point x, weights ``K((t_i - x) / h)`` (Gaussian, or tricube on ``|u| < 1`` as in
    LOWESS) and a weighted least-squares line through the clicks give the rate at x. With
    ``prior_strength = m > 0`` the rate is shrunk toward ``prior_rate(x)`` as if m pseudo-impressions
    at that rate were added at x: ``(W r_ll + m prior) / (W + m)``, ``W`` the summed kernel weight.
    ``degree=0`` gives the local-constant (Nadaraya-Watson) rate instead. The result is clipped to [0, 1].

    >>> x = np.linspace(0, 1, 5)
    >>> smooth_click_rates([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 0], x, 0.3).round(2).tolist()
    [1.0, 0.86, 0.5, 0.14, 0.0]
    """
    t = np.asarray(times, dtype=float)[None, :]
    y = np.asarray(clicks, dtype=float)[None, :]
    x = np.asarray(grid_x, dtype=float)[:, None]
    u = (t - x) / bandwidth
    w = np.exp(-0.5 * u**2) if kernel == "gaussian" else np.clip(1 - np.abs(u) ** 3, 0, None) ** 3
    s0, s1, s2 = w.sum(1), (w * (t - x)).sum(1), (w * (t - x) ** 2).sum(1)
    m0, m1 = (w * y).sum(1), (w * y * (t - x)).sum(1)
    det = s0 * s2 - s1**2
    with np.errstate(invalid="ignore", divide="ignore"):
        local_linear = np.where(det > 1e-12 * np.maximum(s0, 1e-300) ** 2, (s2 * m0 - s1 * m1) / det, m0 / np.maximum(s0, 1e-300))
    if degree == 0:  # Nadaraya-Watson (local constant)
        local_linear = m0 / np.maximum(s0, 1e-300)
    local_linear = np.clip(local_linear, 0.0, 1.0)
    if prior_strength > 0:
        prior = np.broadcast_to(np.asarray(prior_rate if prior_rate is not None else 0.0, dtype=float), local_linear.shape)
        local_linear = (s0 * local_linear + prior_strength * prior) / (s0 + prior_strength)
    return np.clip(local_linear, 0.0, 1.0)


def ctr_standin_curves(n_arms: int = 20, day_seed: int = 0, grid_size: int = 2001, impressions_per_second: float = 1.0, frac: float = 0.1):
    """The click-log stand-in (the paper's §7.4 pipeline): true day curves, a simulated per-second log, its smoothing.

    1. True CTR ``p_a(x) = c_a exp(sum_m alpha_am sin(2 pi m x + phi_am))``, ``c_a ~ LogU[0.02, 0.06]``,
       ``alpha_am ~ U[0, 0.35/m]``, m = 1..3, clipped to [1e-4, 1 - 1e-4].
    2. A day of per-second impressions ``Poisson(impressions_per_second)`` and Binomial clicks.
    3. Trailing one-hour CTR sampled once a minute (1,440 points).
    4. LOWESS-style local-linear smoothing (tricube kernel of half-width ``frac / 2`` of the day, so a
       window holds ``frac`` of the points as in LOWESS with ``it=0``), evaluated on the grid.

    Returns ``(smoothed (n_arms, grid_size), truth (n_arms, grid_size))`` (cached per arguments).
    """
    smoothed, truth = _ctr_standin_curves(int(n_arms), int(day_seed), int(grid_size), float(impressions_per_second), float(frac))
    return smoothed.copy(), truth.copy()


@functools.lru_cache(maxsize=8)
def _ctr_standin_curves(n_arms, day_seed, grid_size, impressions_per_second, frac):
    rng = np.random.default_rng(day_seed)
    x = np.linspace(0.0, 1.0, grid_size)
    c = np.exp(rng.uniform(np.log(0.02), np.log(0.06), n_arms))
    m = np.arange(1, 4)
    alpha = rng.uniform(0, 1, (n_arms, 3)) * (0.35 / m)
    phi = rng.uniform(0, 2 * np.pi, (n_arms, 3))

    def truth_at(z):
        s = (alpha[:, :, None] * np.sin(2 * np.pi * m[None, :, None] * z[None, None, :] + phi[:, :, None])).sum(1)
        return np.clip(c[:, None] * np.exp(s), 1e-4, 1 - 1e-4)

    seconds = 86400
    sec_x = (np.arange(seconds) + 0.5) / seconds
    imps = rng.poisson(impressions_per_second, (n_arms, seconds))
    clicks = rng.binomial(imps, truth_at(sec_x))
    ci, cc = np.cumsum(imps, axis=1), np.cumsum(clicks, axis=1)
    minute_end = np.arange(1, 1441) * 60 - 1
    start = np.maximum(minute_end - 3600, -1)

    def window(cum):
        return cum[:, minute_end] - np.where(start >= 0, cum[:, np.maximum(start, 0)], 0)

    rolling = window(cc) / np.maximum(window(ci), 1)
    minute_x = (np.arange(1440) + 0.5) / 1440
    smoothed = np.empty((n_arms, grid_size))
    for a in range(n_arms):
        smoothed[a] = smooth_click_rates(minute_x, rolling[a], x, bandwidth=frac / 2, kernel="tricube")
    return np.clip(smoothed, 1e-4, 1 - 1e-4), truth_at(x)


@register_environment("ctr-standin")
class CTRStandIn(ClickCurveArms):
    """Click-log stand-in for Yahoo R6B (§7.4): smoothed CTR curves of a simulated day.

    See :func:`ctr_standin_curves`. The day is fixed by ``day_seed``; runs differ in reward noise.

    >>> env = CTRStandIn(horizon=1000, n_arms=5, seed=0)
    >>> env.n_arms, bool(0.005 < env.curves().mean() < 0.1)
    (5, True)
    """

    name = "ctr-standin"
    _parameter_constraints = {"n_arms": [Interval(Integral, 2, None, "left")], "day_seed": [Interval(Integral, 0, None, "left")]}

    def __init__(self, horizon: int, n_arms: int = 20, day_seed: int = 0, noise: str = "bernoulli", amplify: float | None = None, seed=None) -> None:
        self.horizon = horizon
        self.n_arms_ = n_arms
        self.day_seed = day_seed
        self.noise = noise
        self.amplify = amplify
        self.seed = seed

    def get_params(self):
        return {"horizon": self.horizon, "n_arms": self.n_arms_, "day_seed": self.day_seed, "noise": self.noise, "amplify": self.amplify, "seed": self.seed}

    @property
    def grid(self):
        return ctr_standin_curves(self.n_arms_, self.day_seed)[0]  # cached per arguments

    @classmethod
    def _check_examples(cls):
        return [cls(horizon=300, n_arms=3, amplify=10.0, seed=0)]


# --------------------------------------------------------------------------------------- real click logs
def obd_click_log(behavior_policy: str = "random", campaign: str = "all"):
    """The Open Bandit Dataset sample shipped with ``obp`` (ZOZOTOWN, Nov 24-30 2019), as a DataFrame.

    Reads ``obp/dataset/obd/<behavior_policy>/<campaign>/<campaign>.csv`` through
    :mod:`importlib.resources` (obp's own loader fails under pandas 3). Columns: ``timestamp``
    (UTC datetime), ``item_id``, ``position``, ``click``, ``propensity_score``. The ``random``
    logs were collected by a uniform random policy: 10,000 impressions, 80 items, 38 clicks
    (campaign ``all``).
    """
    import importlib.resources as resources

    import pandas as pd

    base = resources.files(import_optional("obp", "The Open Bandit Dataset sample")) / "dataset" / "obd"
    path = base / behavior_policy / campaign / f"{campaign}.csv"
    with resources.as_file(path) as file:
        frame = pd.read_csv(file, usecols=["timestamp", "item_id", "position", "click", "propensity_score"])
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
    return frame.sort_values("timestamp", kind="stable").reset_index(drop=True)


def obd_curves(n_arms: int = 5, behavior_policy: str = "random", campaign: str = "all", bandwidth: float = 0.1, prior_strength: float = 20.0, grid_size: int = 2001):
    curves, items, log = _obd_curves(int(n_arms), behavior_policy, campaign, float(bandwidth), float(prior_strength), int(grid_size))
    return curves.copy(), items.copy(), log.copy()


@functools.lru_cache(maxsize=8)
def _obd_curves(n_arms, behavior_policy, campaign, bandwidth, prior_strength, grid_size):
    """Per-item click-rate curves over the logged week from the OBD sample.

    Time ``x`` in [0, 1] is the position of an impression between the first and last timestamp of
    the log. The campaign-wide rate ``p(x)`` is the local-constant (Nadaraya-Watson, Gaussian kernel, ``bandwidth`` in
    units of the week) click rate of all impressions; each item's curve is its own local-constant rate
    shrunk toward ``p(x)`` with ``prior_strength`` pseudo-impressions (:func:`smooth_click_rates`).
    Items: the ``n_arms`` with the most clicks (ties: more impressions, then lower id).

    Returns ``(curves (n_arms, grid_size), item_ids, log frame)``.
    """
    log = obd_click_log(behavior_policy, campaign)
    ts = log["timestamp"].astype("int64").to_numpy().astype(float)
    x = (ts - ts.min()) / (ts.max() - ts.min())
    grid_x = np.linspace(0.0, 1.0, grid_size)
    clicks = log["click"].to_numpy().astype(float)
    pooled = smooth_click_rates(x, clicks, grid_x, bandwidth, degree=0)
    stats = log.groupby("item_id")["click"].agg(["sum", "count"]).reset_index()
    stats = stats.sort_values(["sum", "count", "item_id"], ascending=[False, False, True])
    items = stats["item_id"].to_numpy()[:n_arms]
    curves = np.empty((len(items), grid_size))
    for j, item in enumerate(items):
        mask = log["item_id"].to_numpy() == item
        curves[j] = smooth_click_rates(x[mask], clicks[mask], grid_x, bandwidth, prior_rate=pooled, prior_strength=prior_strength, degree=0)
    return np.clip(curves, 1e-4, 1 - 1e-4), items, log


@register_environment("obd-click-curves", "obd-real")
class OBDClickCurves(ClickCurveArms):
    """Real click logs: per-item click-rate curves of the Open Bandit Dataset sample, replayed.

    The ``obp`` package ships 10,000 impressions per (behaviour policy, campaign) logged at ZOZOTOWN
    over a week; :func:`obd_curves` turns the uniform-random log into smooth per-item click-rate
    curves over the week, and the environment replays them as ``mu_a(t / T)`` with Bernoulli
    rewards. Real click rates are about 0.4%, so ``amplify`` (see :class:`ClickCurveArms`) is how
    a study at reachable horizons widens the gaps; it is off by default.

    >>> env = OBDClickCurves(horizon=1000, n_arms=3, seed=0)
    >>> env.n_arms, bool(env.curves().max() < 0.1)
    (3, True)
    """

    name = "obd-click-curves"
    _parameter_constraints = {
        "n_arms": [Interval(Integral, 2, 80, "both")],
        "behavior_policy": [Options(("random", "bts"))],
        "campaign": [Options(("all", "men", "women"))],
        "bandwidth": [Interval(Real, 0, None, "neither")],
        "prior_strength": [Interval(Real, 0, None, "left")],
    }

    def __init__(
        self,
        horizon: int,
        n_arms: int = 5,
        behavior_policy: str = "random",
        campaign: str = "all",
        bandwidth: float = 0.1,
        prior_strength: float = 20.0,
        noise: str = "bernoulli",
        amplify: float | None = None,
        seed=None,
    ) -> None:
        self.horizon = horizon
        self.n_arms_ = n_arms
        self.behavior_policy = behavior_policy
        self.campaign = campaign
        self.bandwidth = bandwidth
        self.prior_strength = prior_strength
        self.noise = noise
        self.amplify = amplify
        self.seed = seed

    def get_params(self):
        return {
            "horizon": self.horizon,
            "n_arms": self.n_arms_,
            "behavior_policy": self.behavior_policy,
            "campaign": self.campaign,
            "bandwidth": self.bandwidth,
            "prior_strength": self.prior_strength,
            "noise": self.noise,
            "amplify": self.amplify,
            "seed": self.seed,
        }

    @property
    def grid(self):
        return obd_curves(self.n_arms_, self.behavior_policy, self.campaign, self.bandwidth, self.prior_strength)[0]  # cached

    @property
    def item_ids(self) -> list[int]:
        """The OBD item ids behind arms 0..k-1."""
        return [int(i) for i in obd_curves(self.n_arms_, self.behavior_policy, self.campaign, self.bandwidth, self.prior_strength)[1]]

    @classmethod
    def _check_examples(cls):
        return [cls(horizon=300, n_arms=3, amplify=10.0, seed=0)]

