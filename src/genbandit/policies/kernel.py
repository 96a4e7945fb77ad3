"""Prompt-aware model selection: PAK-UCB, RFF-UCB, their Sup- variants and the paper's baselines.

Hu, Leung & Farnia, "An Online Learning Approach to Prompt-based Selection of Generative Models
and LLMs" (ICML 2025, arXiv 2410.13287). A prompt embedding ``y`` (the context, shared by every
arm) arrives; each arm ``g`` (a generative model) has its own score function ``s_g(y)``. PAK-UCB
fits one kernel ridge regression (KRR) per arm on the rounds that arm was played and plays
``argmax_g mu_g(y) + eta * sigma_g(y)`` (Algorithm 2); RFF-UCB does the same with random Fourier
features (Algorithms 4-5).

Symbols follow the paper: ``alpha`` is the ridge regularisation, ``eta`` the exploration
coefficient (default ``sqrt(2 log(2G/delta))``, delta = 0.05, App. C.4). Shapes: contexts
``(n_runs, n_features)``, actions ``(n_runs,)``.

Kernels (``kernel=``): ``"poly3"`` ``(1 + gamma x.y)^3``, ``"rbf"`` ``exp(-|x-y|^2 / (2 sigma^2))``
and ``"linear"`` ``x.y``. With ``normalize_kernel=True`` (the default) a kernel is used in its
cosine-normalised form ``k(x,y) / sqrt(k(x,x) k(y,y))``, so ``k(y,y) = 1`` as Assumption 1 asks
(``||phi(y)|| <= 1``); for unit-norm prompts this is ``poly3 / (1+gamma)^3`` and leaves RBF and the
linear kernel unchanged. See docs/pak-ucb.md for this and the other choices where the paper is
silent or inconsistent.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import numpy as np

from ..core.base import Policy
from ..core.registry import ENVIRONMENTS, register_policy
from ..core.validation import Interval, Options
from ._kernel_numba import features_and_h, rff_ucb_choose, rff_ucb_index, rff_ucb_select, rff_ucb_update
from ._stats import argmax_random_ties
from .classic import BestSingle, Greedy  # noqa: F401  (the paper's context-free baselines, importable from here too)

__all__ = [
    "kernel_matrix",
    "rff_features",
    "default_eta",
    "PAKUCB",
    "NaiveKRR",
    "SupPAKUCB",
    "RFFUCB",
    "SupRFFUCB",
    "LinUCB",
    "KernelUCB",
    "Greedy",
    "BestSingle",
]

_KERNELS = ("poly3", "rbf", "linear")
_MAPS = ("cos-sin", "cos-phase")
_NO_SUMS = np.zeros((1, 0))  # stands for the centring sums the compiled path does not read when center=False


def default_eta(n_arms: int, delta: float = 0.05) -> float:
    """The paper's exploration coefficient, ``sqrt(2 log(2G/delta))`` (App. C.4).

    >>> round(default_eta(5), 4)
    3.2552
    """
    return math.sqrt(2.0 * math.log(2.0 * n_arms / delta))


def _raw_kernel(X: np.ndarray, Y: np.ndarray, kernel: str, gamma: float, sigma: float) -> np.ndarray:
    if kernel == "linear":
        return X @ Y.T
    if kernel == "poly3":
        return (1.0 + gamma * (X @ Y.T)) ** 3
    sq = (X * X).sum(1)[:, None] + (Y * Y).sum(1)[None, :] - 2.0 * (X @ Y.T)
    return np.exp(-np.maximum(sq, 0.0) / (2.0 * sigma * sigma))


def _raw_diag(X: np.ndarray, kernel: str, gamma: float) -> np.ndarray:
    sq = (X * X).sum(1)
    if kernel == "linear":
        return sq
    if kernel == "poly3":
        return (1.0 + gamma * sq) ** 3
    return np.ones(X.shape[0])


def kernel_matrix(X: Any, Y: Any, kernel: str = "rbf", gamma: float = 5.0, sigma: float = 5.0, normalize: bool = True) -> np.ndarray:
    """Kernel matrix ``K[i, j] = k(X[i], Y[j])``, ``(n, m)`` (Hu et al. 2025, sec. 3.1).

    ``gamma`` scales the polynomial kernel's inner product; ``sigma`` is the RBF bandwidth (the
    paper's "gamma" in App. C.4, not scikit-learn's ``1/(2 sigma^2)``).

    >>> x = np.array([[1.0, 0.0]]); y = np.array([[0.6, 0.8]])
    >>> float(kernel_matrix(x, y, "poly3", gamma=1.0, normalize=False)[0, 0])   # (1 + 0.6)^3
    4.096
    >>> round(float(kernel_matrix(x, y, "rbf", sigma=1.0)[0, 0]), 6)            # exp(-0.8/2)
    0.67032
    """
    X = np.atleast_2d(np.asarray(X, dtype=float))
    Y = np.atleast_2d(np.asarray(Y, dtype=float))
    K = _raw_kernel(X, Y, kernel, gamma, sigma)
    if normalize and kernel != "rbf":
        scale = np.sqrt(np.outer(_raw_diag(X, kernel, gamma), _raw_diag(Y, kernel, gamma)))
        K = K / np.where(scale > 0, scale, 1.0)
    return K


def rff_features(X: np.ndarray, omega: np.ndarray, phase: np.ndarray | None, feature_map: str) -> np.ndarray:
    """Random Fourier features of the rows of ``X`` ``(..., d)`` for frequencies ``omega`` ``(D, d)``.

    ``"cos-sin"`` is eq. (1), ``[cos(w_j.x), sin(w_j.x)]_j / sqrt(D)`` (2D features, unit norm);
    ``"cos-phase"`` is footnote 2, ``sqrt(2/D) cos(w_j.x + b_j)`` (D features).

    >>> rng = np.random.default_rng(0); W = rng.normal(size=(50, 3))
    >>> f = rff_features(rng.normal(size=(4, 3)), W, None, "cos-sin")
    >>> f.shape, np.allclose((f * f).sum(1), 1.0)
    ((4, 100), True)
    """
    proj = X @ omega.T
    n_freq = omega.shape[0]
    if feature_map == "cos-sin":
        return np.concatenate([np.cos(proj), np.sin(proj)], axis=-1) / math.sqrt(n_freq)
    return math.sqrt(2.0 / n_freq) * np.cos(proj + phase)


def _sherman_morrison(Ainv: np.ndarray, f: np.ndarray) -> np.ndarray:
    """In place ``Ainv <- Ainv - h h' / (1 + f'h)`` with ``h = Ainv f`` (a view is updated where it lies); returns h."""
    h = Ainv @ f
    Ainv -= np.outer(h, h / (1.0 + f @ h))
    return h


def sherman_morrison_rows(Ainv: np.ndarray, rows: np.ndarray, arms: np.ndarray, h: np.ndarray, coef: np.ndarray) -> None:
    """In place ``Ainv[r, a] -= coef_r h_r h_r'`` for every run ``r`` and its arm ``a`` (``Ainv`` ``(n_runs, n_arms, F, F)``).

    The Sherman-Morrison step ``(A + f f')^-1 = A^-1 - h h' / (1 + f'h)``, ``h = A^-1 f``, with
    ``coef = 1 / (1 + f'h)``: one BLAS ``ger`` on the matrix itself for a single run, one batched
    update for several, never a loop over runs.
    """
    if rows.size == 1:
        from scipy.linalg.blas import dger

        # the transposed view of a C-ordered matrix is Fortran-ordered: ger updates it in place (Ainv is symmetric)
        dger(-float(coef[0]), h[0], h[0], a=Ainv[int(rows[0]), int(arms[0])].T, overwrite_a=1)
    else:
        Ainv[rows, arms] -= np.einsum("ri,rj->rij", h, h * coef[:, None])


class _PerDecisionCache:
    """Keeps what ``select`` computed for a context so that the ``update`` on the same context reuses it.

    The cache (and any other per-decision scratch a class names in ``_scratch``) is not learned state:
    :meth:`state_dict` stores it empty, so a saved policy is the same whether or not a ``select`` came last.
    """

    _scratch: tuple[str, ...] = ("_last",)

    def _cache_get(self, contexts: np.ndarray) -> tuple | None:
        last = getattr(self, "_last", None)
        if last is not None and last[0] == contexts.shape and last[1] == contexts.tobytes():  # a byte compare: cheaper than array_equal
            return last[2:]
        return None

    def _cache_put(self, contexts: np.ndarray, *values: Any) -> tuple:
        self._last = (contexts.shape, contexts.tobytes(), *values)
        return values

    def reset(self, *args: Any, **kwargs: Any):
        self._last = None
        return super().reset(*args, **kwargs)

    def __getstate__(self) -> dict:
        """A copy or a pickle leaves the scratch behind too (it may reference this policy's own arrays, as
        :class:`~genbandit.policies.routing.EvidenceThompson`'s compiled state does, which cannot be pickled): the copy
        builds its own at its first decision, the same numbers."""
        return {**vars(self), **dict.fromkeys(self._scratch)}

    def state_dict(self) -> dict:
        kept = {name: getattr(self, name, None) for name in self._scratch}
        vars(self).update(dict.fromkeys(kept))
        try:
            return super().state_dict()
        finally:
            vars(self).update(kept)


def _ucb_index(mu: np.ndarray, sd: np.ndarray, eta: float) -> np.ndarray:
    """``mu + eta sd``, +inf where an arm has no data (``mu`` is inf), without 0 x inf."""
    untried = np.isinf(mu)
    return np.where(untried, np.inf, np.where(untried, 0.0, mu) + eta * np.where(untried, 0.0, sd))


class _ContextualPolicy(Policy):
    """Shared parameters and checks of the contextual policies of this module."""

    contextual = True
    _parameter_constraints = {
        "n_features": [Interval(Integral, 1, None, "left")],
        "alpha": [Interval(Real, 0, None, "neither")],
        "eta": [None, Interval(Real, 0, None, "left")],
        "delta": [Interval(Real, 0, 1, "neither")],
    }

    def _eta(self) -> float:
        return default_eta(self.n_arms, self.delta) if self.eta is None else float(self.eta)

    @classmethod
    def _check_examples(cls):
        Setup4Synthetic = ENVIRONMENTS.get("Setup4Synthetic")

        env = Setup4Synthetic(setup="expert", contexts="gaussian", dim=6, n_prompts_per_category=8, seed=1)
        return [(cls(n_arms=5, n_features=6, seed=0), env)]


# ---------------------------------------------------------------------------------------------
# Exact per-arm KRR with incremental (Schur-complement) inverse updates
# ---------------------------------------------------------------------------------------------
def _krr_new(d: int) -> dict:
    """An empty per-arm KRR: contexts X (n, d), targets v (n,), Kinv = (K + alpha I)^-1, a = Kinv v."""
    return {"X": np.zeros((0, d)), "v": np.zeros(0), "Kinv": np.zeros((0, 0)), "a": np.zeros(0)}


class _KRRMixin:
    """Kernel evaluation and the O(n^2) block-inverse insert/predict of one KRR (Hu et al. 2025, Algorithm 2)."""

    def _k(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        return kernel_matrix(X, Y, self.kernel, self.gamma, self.sigma, self.normalize_kernel)

    def _k_self(self, X: np.ndarray) -> np.ndarray:
        if self.kernel == "rbf" or self.normalize_kernel:
            return np.ones(X.shape[0])
        return _raw_diag(X, self.kernel, self.gamma)

    def _krr_insert(self, model: dict, x: np.ndarray, s: float) -> None:
        """Add (x, s): ``Kinv' = [[Kinv + u u'/c, -u/c], [-u'/c, 1/c]]``, u = Kinv b, c = k(x,x) + alpha - b'u."""
        X, Kinv = model["X"], model["Kinv"]
        n = X.shape[0]
        kxx = float(self._k_self(x[None])[0]) + self.alpha
        new = np.empty((n + 1, n + 1))
        if n == 0:
            new[0, 0] = 1.0 / kxx
        else:
            b = self._k(X, x[None])[:, 0]
            u = Kinv @ b
            c = max(kxx - b @ u, 1e-12)
            new[:n, :n] = Kinv + np.outer(u, u / c)
            new[:n, n] = new[n, :n] = -u / c
            new[n, n] = 1.0 / c
        model["X"] = np.vstack([X, x[None]])
        model["v"] = np.append(model["v"], s)
        model["Kinv"] = new
        model["a"] = new @ model["v"]

    def _krr_predict(self, model: dict, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mu, sigma) at the rows of ``Y`` (m, d): ``mu = k_y'a``, ``sigma = alpha^-1/2 sqrt(k(y,y) - k_y'Kinv k_y)``."""
        if model["X"].shape[0] == 0:
            return np.full(Y.shape[0], np.inf), np.full(Y.shape[0], np.inf)
        Ky = self._k(model["X"], Y)
        mu = Ky.T @ model["a"]
        var = self._k_self(Y) - (Ky * (model["Kinv"] @ Ky)).sum(0)
        return mu, np.sqrt(np.maximum(var, 0.0) / self.alpha)


_KERNEL_CONSTRAINTS = {
    "kernel": [Options(_KERNELS)],
    "gamma": [Interval(Real, 0, None, "neither")],
    "sigma": [Interval(Real, 0, None, "neither")],
    "normalize_kernel": [bool],
}


@register_policy("pakucb")
class PAKUCB(_KRRMixin, _ContextualPolicy):
    """PAK-UCB (Hu, Leung & Farnia 2025, Algorithm 2): per-arm kernel ridge regression with a UCB.

    For each arm ``g`` with data ``(y_i, s_i)``, ``i in Psi_g``:
    ``mu_g(y) = k_y' (K + alpha I)^-1 v`` and
    ``sigma_g(y) = alpha^-1/2 sqrt(k(y,y) - k_y' (K + alpha I)^-1 k_y)``; play
    ``argmax_g mu_g + eta sigma_g`` (untried arms first, ties at random). ``(K + alpha I)^-1`` is
    kept per arm and grown by a Schur-complement block update, O(n_g^2) per round, never refit.
    ``kernel="linear"`` gives PAK-UCB-lin (disjoint per-arm LinUCB in dual form).

    Parameters
    ----------
    n_arms, n_features : int
    kernel : {"poly3", "rbf", "linear"}
    gamma : float
        Polynomial scale (paper: 5.0 or 10.0).
    sigma : float
        RBF bandwidth (paper: 5.0; 0.5 for its LLM experiments).
    normalize_kernel : bool
        Use ``k(x,y)/sqrt(k(x,x)k(y,y))`` (see the module docstring).
    alpha : float
        Ridge regularisation (paper: 1.0).
    eta : float or None
        Exploration; ``None`` means ``sqrt(2 log(2G/delta))``.
    delta : float
    seed : None, int or Generator

    Examples
    --------
    >>> from genbandit.policies.kernel import PAKUCB
    >>> policy = PAKUCB(n_arms=2, n_features=2, kernel="linear", seed=0)
    >>> x, z = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    >>> for ctx, arm, r in [(x, 0, 1.0), (x, 1, 0.0), (z, 0, 0.0), (z, 1, 1.0)] * 5:
    ...     _ = policy.update(arm, r, context=ctx)
    >>> policy.select(x), policy.select(z)   # arm 0 wins on x, arm 1 on z
    (0, 1)
    """

    name = "PAK-UCB"
    _parameter_constraints = _KERNEL_CONSTRAINTS

    def __init__(self, n_arms: int, n_features: int, kernel: str = "poly3", gamma: float = 5.0, sigma: float = 5.0,
                 normalize_kernel: bool = True, alpha: float = 1.0, eta: float | None = None, delta: float = 0.05, seed=None) -> None:
        self.n_arms = n_arms
        self.n_features = n_features
        self.kernel = kernel
        self.gamma = gamma
        self.sigma = sigma
        self.normalize_kernel = normalize_kernel
        self.alpha = alpha
        self.eta = eta
        self.delta = delta
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        self._models = [[_krr_new(self.n_features) for _ in range(self.n_arms)] for _ in range(n_runs)]

    def ucb(self, contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mu, sigma) of every arm for every run, ``(n_runs, n_arms)`` each (inf for untried arms)."""
        mu = np.empty((len(self._models), self.n_arms))
        sd = np.empty_like(mu)
        for r, models in enumerate(self._models):
            for g, model in enumerate(models):
                m, s = self._krr_predict(model, contexts[r : r + 1])
                mu[r, g], sd[r, g] = m[0], s[0]
        return mu, sd

    def _select(self, contexts: np.ndarray) -> np.ndarray:
        mu, sd = self.ucb(contexts)
        return argmax_random_ties(_ucb_index(mu, sd, self._eta()), self._rng)

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray) -> None:
        for r, (arm, reward) in enumerate(zip(actions, feedback)):
            self._krr_insert(self._models[r][int(arm)], contexts[r], float(reward))


@register_policy("naivekrr")
class NaiveKRR(PAKUCB):
    """Naive-KRR (Hu et al. 2025, section 5 baselines): PAK-UCB-poly3 with eta = 0, greedy on per-arm KRR means.

    >>> from genbandit.policies.kernel import NaiveKRR
    >>> NaiveKRR(n_arms=3, n_features=4).eta
    0.0
    """

    name = "Naive-KRR"

    def __init__(self, n_arms: int, n_features: int, kernel: str = "poly3", gamma: float = 5.0, sigma: float = 5.0,
                 normalize_kernel: bool = True, alpha: float = 1.0, seed=None) -> None:
        super().__init__(n_arms, n_features, kernel=kernel, gamma=gamma, sigma=sigma, normalize_kernel=normalize_kernel, alpha=alpha, eta=0.0, seed=seed)


# ---------------------------------------------------------------------------------------------
# Random Fourier features with Sherman-Morrison updates
# ---------------------------------------------------------------------------------------------
class _RFFMixin:
    """Frequencies drawn once per run and shared by every arm (Hu et al. 2025, Algorithms 4 and 5)."""

    def _n_out(self) -> int:
        return 2 * self.n_components if self.feature_map == "cos-sin" else self.n_components

    def _draw_frequencies(self, n_runs: int) -> None:
        # RBF with bandwidth sigma: Fourier density N(0, sigma^-2 I).
        self._omega = self._rng.standard_normal((n_runs, self.n_components, self.n_features)) / self.sigma
        self._phase = self._rng.uniform(0.0, 2.0 * np.pi, (n_runs, self.n_components))

    def _features(self, contexts: np.ndarray, runs: Any = slice(None)) -> np.ndarray:
        """phi(y) for each run's context, ``(n_runs, F)``."""
        proj = np.matmul(self._omega[runs], contexts[:, :, None])[..., 0]  # (R, D)
        D = self.n_components
        if self.feature_map == "cos-sin":
            return np.concatenate([np.cos(proj), np.sin(proj)], axis=1) / math.sqrt(D)
        return math.sqrt(2.0 / D) * np.cos(proj + self._phase[runs])


_RFF_CONSTRAINTS = {
    "n_components": [Interval(Integral, 1, None, "left")],
    "feature_map": [Options(_MAPS)],
    "sigma": [Interval(Real, 0, None, "neither")],
}


@register_policy("rffucb")
class RFFUCB(_PerDecisionCache, _RFFMixin, _ContextualPolicy):
    """RFF-UCB (Hu, Leung & Farnia 2025, Algorithms 4-5): per-arm ridge UCB on random Fourier features of an RBF kernel.

    ``phi(y)`` is eq. (1) (``feature_map="cos-sin"``, 2D features) or footnote 2's
    ``sqrt(2/D) cos(w.y + b)`` (``"cos-phase"``, D features), with ``w ~ N(0, sigma^-2 I)`` drawn
    once. Per arm ``A_g^-1 = (Phi_g'Phi_g + alpha I)^-1`` (Sherman-Morrison, O(F^2) per update)
    and ``b_g = Phi_g' v``; ``mu_g = phi' A_g^-1 b_g``, ``sigma_g = sqrt(phi' A_g^-1 phi)``.
    Cost per round is independent of t. Vectorised over runs; with one run (a router, a replay)
    ``select`` computes ``phi`` and every ``A_g^-1 phi`` in one compiled call and ``update`` reuses
    them for the Sherman-Morrison step in place (:mod:`genbandit.policies._kernel_numba`), with the
    same choices as the batched path.

    ``center=True`` (our addition, not the paper's estimator; recommended when scores sit far from 0
    centring scores that sit far from 0): each arm's ridge fits its scores minus their running mean
    ``m_g``, so an arm predicts ``m_g`` rather than 0 where it has seen nothing alike:
    ``mu_g = m_g + phi' A_g^-1 Phi_g' (v - m_g 1)``. The width is unchanged.

    Parameters
    ----------
    n_arms, n_features : int
    n_components : int
        D, the number of frequencies (paper: 200).
    feature_map : {"cos-sin", "cos-phase"}
    sigma : float
        RBF bandwidth (paper: 5.0; 0.5 for LLM experiments).
    alpha, eta, delta, seed : as in :class:`PAKUCB`.
    center : bool, default False
        Fit each arm's scores around their running mean (see above).

    Examples
    --------
    >>> from genbandit.policies.kernel import RFFUCB
    >>> policy = RFFUCB(n_arms=2, n_features=2, n_components=50, sigma=1.0, seed=0)
    >>> x, z = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    >>> for ctx, arm, r in [(x, 0, 1.0), (x, 1, 0.0), (z, 0, 0.0), (z, 1, 1.0)] * 10:
    ...     _ = policy.update(arm, r, context=ctx)
    >>> policy.select(x), policy.select(z)
    (0, 1)
    """

    name = "RFF-UCB"
    _parameter_constraints = {**_RFF_CONSTRAINTS, "center": [bool]}
    #: With one run, ``select`` and ``update`` run compiled (:mod:`genbandit.policies._kernel_numba`), deciding as the batched path.
    _compiled_single_run: bool = True

    def __init__(self, n_arms: int, n_features: int, n_components: int = 200, feature_map: str = "cos-sin", sigma: float = 5.0,
                 alpha: float = 1.0, eta: float | None = None, delta: float = 0.05, center: bool = False, seed=None) -> None:
        self.n_arms = n_arms
        self.n_features = n_features
        self.n_components = n_components
        self.feature_map = feature_map
        self.sigma = sigma
        self.alpha = alpha
        self.eta = eta
        self.delta = delta
        self.center = center
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        F = self._n_out()
        self._draw_frequencies(n_runs)
        self._Ainv = np.broadcast_to(np.eye(F) / self.alpha, (n_runs, self.n_arms, F, F)).copy()
        self._b = np.zeros((n_runs, self.n_arms, F))
        self._counts = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        if self.center:
            self._feature_sums = np.zeros((n_runs, self.n_arms, F))  # Phi_g' 1
            self._score_sums = np.zeros((n_runs, self.n_arms))

    def _features_and_h(self, contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(phi, A_g^-1 phi for every arm), computed once per context: the ``update`` after a ``select`` on it reuses them."""
        cached = self._cache_get(contexts)
        if cached is not None:
            return cached
        if self._compiled():
            f, h = self._one_run_buffers()
            features_and_h(*self._one_run_map(), contexts[0], self._Ainv[0], f[0], h[0])
            return self._cache_put(contexts, f, h)
        f = self._features(contexts)
        return self._cache_put(contexts, f, np.matmul(self._Ainv, f[:, None, :, None])[..., 0])  # (R, F), (R, G, F)

    def ucb(self, contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mu, sigma), ``(n_runs, n_arms)`` each."""
        f, h = self._features_and_h(contexts)
        mu = (h * self._b).sum(-1)
        if self.center:
            mean = self._score_sums / np.maximum(self._counts, 1)
            mu = mu + mean * (1.0 - (h * self._feature_sums).sum(-1))
        sd = np.sqrt(np.maximum((h * f[:, None, :]).sum(-1), 0.0))
        return mu, sd

    def _compiled(self) -> bool:
        return self._n_runs == 1 and self._compiled_single_run

    def _one_run_buffers(self) -> tuple[np.ndarray, np.ndarray]:
        """Room for one run's phi ``(1, F)`` and every arm's ``A_g^-1 phi`` ``(1, G, F)``, filled by the compiled functions."""
        return np.empty((1, self._n_out())), np.empty((1, self.n_arms, self._n_out()))

    def _one_run_map(self) -> tuple:
        """Run 0's feature map, as the compiled functions take it before the context."""
        return self._omega[0], self._phase[0], self.feature_map == "cos-sin"

    def _one_run(self) -> tuple:
        """Run 0's learned arrays, in the order the compiled functions take them after the context."""
        sums = (self._feature_sums[0], self._score_sums[0]) if self.center else (_NO_SUMS, _NO_SUMS[0])
        return self._Ainv[0], self._b[0], self._counts[0], *sums, self.center

    def _index(self, contexts: np.ndarray) -> np.ndarray:
        """``mu_g + eta sigma_g`` of every arm, +inf for untried arms, ``(n_runs, n_arms)``."""
        if self._compiled():
            f, h = self._features_and_h(contexts)
            index = np.empty((1, self.n_arms))
            rff_ucb_index(f[0], h[0], *self._one_run()[1:], self._eta(), index[0])
            return index
        mu, sd = self.ucb(contexts)
        return np.where(self._counts == 0, np.inf, mu + self._eta() * sd)

    def _select(self, contexts: np.ndarray) -> np.ndarray:
        if self._compiled():
            cached = self._cache_get(contexts)  # phi and A_g^-1 phi: computed by probabilities() when it came first on this context
            if cached is not None:
                f, h = cached
                return np.array([rff_ucb_choose(f[0], h[0], *self._one_run()[1:], self._eta(), self._rng.random(self.n_arms))])
            f, h = self._cache_put(contexts, *self._one_run_buffers())  # filled by the call below, kept for the update
            return np.array([rff_ucb_select(*self._one_run_map(), contexts[0], *self._one_run(), self._eta(), self._rng.random(self.n_arms), f[0], h[0])])
        return argmax_random_ties(self._index(contexts), self._rng)

    def _probabilities(self, contexts: np.ndarray) -> np.ndarray:
        """Exact: the UCB rule is deterministic but for ties, which ``select`` breaks uniformly at random."""
        index = self._index(contexts)
        top = index == index.max(axis=1, keepdims=True)
        return top / top.sum(axis=1, keepdims=True)

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray) -> None:
        rows = np.arange(actions.shape[0])
        f, h = self._features_and_h(contexts)
        self._last = None
        if self._compiled():
            rff_ucb_update(*self._one_run(), int(actions[0]), float(feedback[0]), f[0], h[0])
            return
        h = h[rows, actions]
        sherman_morrison_rows(self._Ainv, rows, actions, h, 1.0 / (1.0 + (f * h).sum(-1)))
        self._b[rows, actions] += feedback[:, None] * f
        self._counts[rows, actions] += 1
        if self.center:
            self._feature_sums[rows, actions] += f
            self._score_sums[rows, actions] += feedback


# ---------------------------------------------------------------------------------------------
# Sup- variants (Algorithms 3 and 6): staged elimination, used for the analysis
# ---------------------------------------------------------------------------------------------
class _SupMixin:
    """SupLinUCB-style staging (Auer 2003) over per-(stage, arm) models (Hu et al. 2025, Algorithms 3 and 6).

    Stages m = 1..M, M = ceil(log2 T). A round either exploits (every width below 1/sqrt(T); the
    round joins no index set), eliminates and moves to the next stage (every width below 2^(1-m)),
    or explores an arm whose width is above 2^(1-m) and stores the round in that arm's stage-m set.
    If the stages run out, the round exploits among the survivors.
    """

    def _n_stages(self) -> int:
        return max(1, math.ceil(math.log2(max(self.horizon, 2))))

    def _sup_choose(self, r: int, y: np.ndarray) -> tuple[int, int]:
        """(arm, stage or -1) for run r at context y."""
        eta, root_a = self._eta(), math.sqrt(self.alpha)
        arms = np.arange(self.n_arms)
        for m in range(self._n_stages()):
            mu, sd = self._stage_ucb(r, m, y)
            mu, sd = mu[arms], sd[arms]
            width = (2 * eta + root_a) * sd
            if np.all((eta + root_a) * sd <= 1.0 / math.sqrt(self.horizon)):
                return int(arms[argmax_random_ties((mu + eta * sd)[None], self._rng)[0]]), -1
            if np.all(width <= 2.0 ** (-m)):
                upper = mu + width
                arms = arms[upper >= upper.max() - 2.0 ** (1 - m)]
                continue
            wide = np.flatnonzero(width > 2.0 ** (-m))
            return int(arms[wide[self._rng.integers(wide.size)]]), m
        mu, sd = self._stage_ucb(r, self._n_stages() - 1, y)
        return int(arms[argmax_random_ties((mu[arms] + eta * sd[arms])[None], self._rng)[0]]), -1

    def _select(self, contexts: np.ndarray) -> np.ndarray:
        out = np.empty(contexts.shape[0], dtype=np.int64)
        for r in range(contexts.shape[0]):
            out[r], self._stage[r] = self._sup_choose(r, contexts[r])
            self._stage_arm[r] = out[r]
        return out

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray) -> None:
        for r, arm in enumerate(actions):
            m = int(self._stage[r])
            if m >= 0 and int(self._stage_arm[r]) == int(arm):
                self._stage_insert(r, m, int(arm), contexts[r], float(feedback[r]))
            self._stage[r] = -1


@register_policy("suppakucb")
class SupPAKUCB(_SupMixin, _KRRMixin, _ContextualPolicy):
    """Sup-PAK-UCB (Hu, Leung & Farnia 2025, Algorithm 3): PAK-UCB with Auer's staged index sets.

    Each stage keeps its own per-arm KRR, so the rewards inside an index set are independent
    (Lemma 2); regret O~(sqrt(d_eff G T)) (Theorem 3). A round that exploits is not stored.
    An ``update`` stores the round only for the arm ``select`` just returned.

    Examples
    --------
    >>> from genbandit.policies.kernel import SupPAKUCB
    >>> policy = SupPAKUCB(n_arms=2, n_features=2, horizon=100, kernel="linear", seed=0)
    >>> policy.select(np.array([1.0, 0.0])) in (0, 1), policy._n_stages()
    (True, 7)
    """

    name = "Sup-PAK-UCB"
    _parameter_constraints = {**_KERNEL_CONSTRAINTS, "horizon": [Interval(Integral, 1, None, "left")]}

    def __init__(self, n_arms: int, n_features: int, horizon: int = 10000, kernel: str = "poly3", gamma: float = 5.0, sigma: float = 5.0,
                 normalize_kernel: bool = True, alpha: float = 1.0, eta: float | None = None, delta: float = 0.05, seed=None) -> None:
        self.n_arms = n_arms
        self.n_features = n_features
        self.horizon = horizon
        self.kernel = kernel
        self.gamma = gamma
        self.sigma = sigma
        self.normalize_kernel = normalize_kernel
        self.alpha = alpha
        self.eta = eta
        self.delta = delta
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        M = self._n_stages()
        self._models = [[[_krr_new(self.n_features) for _ in range(self.n_arms)] for _ in range(M)] for _ in range(n_runs)]
        self._stage = np.full(n_runs, -1, dtype=np.int64)
        self._stage_arm = np.full(n_runs, -1, dtype=np.int64)

    def _stage_ucb(self, r: int, m: int, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pairs = [self._krr_predict(model, y[None]) for model in self._models[r][m]]
        return np.array([p[0][0] for p in pairs]), np.array([p[1][0] for p in pairs])

    def _stage_insert(self, r: int, m: int, g: int, y: np.ndarray, s: float) -> None:
        self._krr_insert(self._models[r][m][g], y, s)


@register_policy("suprffucb")
class SupRFFUCB(_SupMixin, _RFFMixin, _ContextualPolicy):
    """Sup-RFF-UCB (Hu, Leung & Farnia 2025, Algorithm 6): Sup-PAK-UCB's staging on random Fourier features.

    Theorem 4 lets the feature count grow with t (eq. 14, D of order t^4 d) and widens the
    confidence bounds by B_1, B_2 (eqs. 15-16); that is impractical, so this implementation keeps D
    fixed and takes B_1 = B_2 = 0 (the stated approximation; docs/pak-ucb.md).

    Examples
    --------
    >>> from genbandit.policies.kernel import SupRFFUCB
    >>> policy = SupRFFUCB(n_arms=3, n_features=2, horizon=64, n_components=20, seed=0)
    >>> policy.select(np.array([0.6, 0.8])) in (0, 1, 2)
    True
    """

    name = "Sup-RFF-UCB"
    _parameter_constraints = {**_RFF_CONSTRAINTS, "horizon": [Interval(Integral, 1, None, "left")]}

    def __init__(self, n_arms: int, n_features: int, horizon: int = 10000, n_components: int = 200, feature_map: str = "cos-sin",
                 sigma: float = 5.0, alpha: float = 1.0, eta: float | None = None, delta: float = 0.05, seed=None) -> None:
        self.n_arms = n_arms
        self.n_features = n_features
        self.horizon = horizon
        self.n_components = n_components
        self.feature_map = feature_map
        self.sigma = sigma
        self.alpha = alpha
        self.eta = eta
        self.delta = delta
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        F, M = self._n_out(), self._n_stages()
        self._draw_frequencies(n_runs)
        self._Ainv = np.broadcast_to(np.eye(F) / self.alpha, (n_runs, M, self.n_arms, F, F)).copy()
        self._b = np.zeros((n_runs, M, self.n_arms, F))
        self._counts = np.zeros((n_runs, M, self.n_arms), dtype=np.int64)
        self._stage = np.full(n_runs, -1, dtype=np.int64)
        self._stage_arm = np.full(n_runs, -1, dtype=np.int64)

    def _stage_ucb(self, r: int, m: int, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        f = self._features(y[None], slice(r, r + 1))[0]
        h = self._Ainv[r, m] @ f  # (G, F)
        mu = (h * self._b[r, m]).sum(-1)
        sd = np.sqrt(np.maximum(h @ f, 0.0))
        empty = self._counts[r, m] == 0
        return np.where(empty, np.inf, mu), np.where(empty, np.inf, sd)

    def _stage_insert(self, r: int, m: int, g: int, y: np.ndarray, s: float) -> None:
        f = self._features(y[None], slice(r, r + 1))[0]
        _sherman_morrison(self._Ainv[r, m, g], f)
        self._b[r, m, g] += s * f
        self._counts[r, m, g] += 1


# ---------------------------------------------------------------------------------------------
# Baselines (Hu et al. 2025, sec. 6.2)
# ---------------------------------------------------------------------------------------------
def _joint_inputs(contexts: np.ndarray, n_arms: int) -> np.ndarray:
    """z_{t,g} = [y_t ; onehot(g)] for every run and arm, ``(n_runs, n_arms, d + G)``."""
    n_runs, d = contexts.shape
    Z = np.zeros((n_runs, n_arms, d + n_arms))
    Z[:, :, :d] = contexts[:, None, :]
    Z[:, np.arange(n_arms), d + np.arange(n_arms)] = 1.0
    return Z


@register_policy("linucb-shared")
class LinUCB(_ContextualPolicy):
    """LinUCB with one shared weight (Chu et al. 2011), as the PAK-UCB paper's baseline (sec. 6.2).

    One ridge model on ``z = [y ; onehot(g)]``: ``A = alpha I + sum z z'``, ``b = sum r z``,
    ``UCB_g = z_g' A^-1 b + eta sqrt(z_g' A^-1 z_g)``. It models ``theta_y' y + theta_g``, a shared
    slope plus a per-arm offset, so it cannot follow rankings that reverse across prompt types.
    ``eta`` defaults to the PAK-UCB value ``sqrt(2 log(2G/delta))`` (the official code's baseline
    uses ``2 log(2G/delta)``; pass ``eta`` to get it). Arms never played come first (sec. 6.2,
    as for every baseline there), ties at random.

    Examples
    --------
    >>> from genbandit.policies.kernel import LinUCB
    >>> policy = LinUCB(n_arms=2, n_features=2, seed=0)
    >>> for _ in range(20):
    ...     _ = policy.update(0, 1.0, context=[1.0, 0.0]); _ = policy.update(1, 0.0, context=[1.0, 0.0])
    >>> policy.select([0.0, 1.0])   # the offset of arm 0 wins everywhere
    0
    """

    name = "LinUCB"

    def __init__(self, n_arms: int, n_features: int, alpha: float = 1.0, eta: float | None = None, delta: float = 0.05, seed=None) -> None:
        self.n_arms = n_arms
        self.n_features = n_features
        self.alpha = alpha
        self.eta = eta
        self.delta = delta
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        p = self.n_features + self.n_arms
        self._Ainv = np.broadcast_to(np.eye(p) / self.alpha, (n_runs, p, p)).copy()
        self._b = np.zeros((n_runs, p))
        self._pulls = np.zeros((n_runs, self.n_arms), dtype=np.int64)

    def _select(self, contexts: np.ndarray) -> np.ndarray:
        d, G = self.n_features, self.n_arms
        # A^-1 z_g = A^-1[:, :d] y + A^-1[:, d + g]: one matrix-vector product for all arms, O(p^2)
        u = np.matmul(self._Ainv[:, :, :d], contexts[:, :, None])[..., 0]  # (R, p)
        H = u[:, None, :] + self._Ainv[:, :, d:].transpose(0, 2, 1)  # (R, G, p)
        mu = (H * self._b[:, None, :]).sum(-1)
        var = H[:, :, :d] @ contexts[:, :, None]
        var = var[..., 0] + H[:, np.arange(G), d + np.arange(G)]
        index = mu + self._eta() * np.sqrt(np.maximum(var, 0.0))
        return argmax_random_ties(np.where(self._pulls == 0, np.inf, index), self._rng)

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray) -> None:
        rows = np.arange(actions.shape[0])
        self._pulls[rows, actions] += 1
        z = _joint_inputs(contexts, self.n_arms)[rows, actions]  # (R, p)
        for r in rows:
            _sherman_morrison(self._Ainv[r], z[r])
        self._b += feedback[:, None] * z


@register_policy("kernelucb-shared")
class KernelUCB(_KRRMixin, _ContextualPolicy):
    """KernelUCB (Valko et al. 2013) with one shared KRR on ``[y ; onehot(g)]``, the paper's baseline (sec. 6.2).

    ``UCB_g = k_z' (K + alpha I)^-1 v + eta alpha^-1/2 sqrt(k(z,z) - k_z' (K + alpha I)^-1 k_z)`` with
    ``z = [y ; onehot(g)]`` and the polynomial kernel ``(1 + gamma z.z')^3``, gamma = 1. Every
    round joins one KRR, so a round costs O(t^2) (Schur update, as PAK-UCB).

    Examples
    --------
    >>> from genbandit.policies.kernel import KernelUCB
    >>> policy = KernelUCB(n_arms=2, n_features=2, seed=0)
    >>> _ = policy.update(0, 1.0, context=[1.0, 0.0])
    >>> policy._models[0]["X"].shape
    (1, 4)
    """

    name = "KernelUCB"
    _parameter_constraints = _KERNEL_CONSTRAINTS

    def __init__(self, n_arms: int, n_features: int, kernel: str = "poly3", gamma: float = 1.0, sigma: float = 5.0,
                 normalize_kernel: bool = True, alpha: float = 1.0, eta: float | None = None, delta: float = 0.05, seed=None) -> None:
        self.n_arms = n_arms
        self.n_features = n_features
        self.kernel = kernel
        self.gamma = gamma
        self.sigma = sigma
        self.normalize_kernel = normalize_kernel
        self.alpha = alpha
        self.eta = eta
        self.delta = delta
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        self._models = [_krr_new(self.n_features + self.n_arms) for _ in range(n_runs)]

    def _select(self, contexts: np.ndarray) -> np.ndarray:
        Z = _joint_inputs(contexts, self.n_arms)
        index = np.empty((contexts.shape[0], self.n_arms))
        for r, model in enumerate(self._models):
            mu, sd = self._krr_predict(model, Z[r])
            index[r] = _ucb_index(mu, sd, self._eta())
        return argmax_random_ties(index, self._rng)

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray) -> None:
        Z = _joint_inputs(contexts, self.n_arms)
        for r, arm in enumerate(actions):
            self._krr_insert(self._models[r], Z[r, int(arm)], float(feedback[r]))
