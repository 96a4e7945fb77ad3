"""Small numerical kernels the policies share: KL-UCB indices, index choice with ties, accumulation, sampling."""

from __future__ import annotations

import numba
import numpy as np

from ..core.validation import InvalidParameterError

__all__ = ["kl_bernoulli", "kl_ucb_index", "argmax_random_ties", "choose_by_index", "accumulate", "sample_rows", "clip01", "needs_horizon_or"]

_EPS = 1e-15


@numba.vectorize(["float64(float64, float64)"], cache=True)
def kl_bernoulli(p: float, q: float) -> float:  # pragma: no cover - compiled
    """Kullback-Leibler divergence between Bernoulli(p) and Bernoulli(q), clipped away from 0 and 1."""
    p = min(max(p, _EPS), 1.0 - _EPS)
    q = min(max(q, _EPS), 1.0 - _EPS)
    return p * np.log(p / q) + (1.0 - p) * np.log((1.0 - p) / (1.0 - q))


@numba.vectorize(["float64(float64, float64)"], cache=True)
def kl_ucb_index(mean: float, budget: float) -> float:  # pragma: no cover - compiled
    """max{q in [mean, 1] : KL(mean, q) <= budget} (Garivier & Cappe 2011, eq. 4), to 1e-12.

    ``budget`` is the exploration level divided by the pull count, e.g. ``log(t) / n``. Newton's
    method on the convex, increasing ``q -> KL(mean, q) - budget`` started above the root (at
    Pinsker's bound ``mean + sqrt(budget / 2)``) decreases monotonically onto it.
    """
    if budget <= 0.0:
        return mean
    p = min(max(mean, _EPS), 1.0 - _EPS)
    q = min(p + np.sqrt(0.5 * budget), 1.0 - 1e-12)
    for _ in range(50):
        gap = p * np.log(p / q) + (1.0 - p) * np.log((1.0 - p) / (1.0 - q)) - budget
        if gap <= 1e-12:
            break
        step = gap * q * (1.0 - q) / (q - p)
        q = max(q - step, p)
    return max(q, mean)


def sample_rows(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per row of ``probs`` ``(n_runs, n_arms)`` by inverting the row's CDF."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random((probs.shape[0], 1)) * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=1), probs.shape[1] - 1)


@numba.njit(cache=True)
def choose_by_index(index: np.ndarray, counts: np.ndarray, priority: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Per run: an untried arm if any, else the arm of largest ``index``; ties go to the larger ``priority``.

    ``index``, ``counts`` and ``priority`` are ``(n_runs, n_arms)``; ``priority`` is a random
    permutation per run drawn at reset, so ties are broken uniformly over runs without drawing
    random numbers every round.
    """
    n_runs, n_arms = index.shape
    out = np.empty(n_runs, dtype=np.int64)
    for r in range(n_runs):
        best = -1
        untried = False
        for a in range(n_arms):
            if counts[r, a] == 0:
                if not untried or priority[r, a] > priority[r, best]:
                    best = a
                untried = True
            elif not untried:
                if best < 0 or index[r, a] > index[r, best] or (index[r, a] == index[r, best] and priority[r, a] > priority[r, best]):
                    best = a
        out[r] = best
    return out


@numba.njit(cache=True)
def accumulate(counts: np.ndarray, sums: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:  # pragma: no cover - compiled
    """counts[r, actions[r]] += 1 and sums[r, actions[r]] += rewards[r] for every run ``r``."""
    for r in range(actions.shape[0]):
        counts[r, actions[r]] += 1
        sums[r, actions[r]] += rewards[r]


def argmax_random_ties(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Row-wise argmax of ``values`` ``(n_runs, n_arms)``, exact ties broken uniformly at random."""
    is_best = values == values.max(axis=1, keepdims=True)
    return np.where(is_best, rng.random(values.shape) + 1.0, 0.0).argmax(axis=1)


def clip01(x: np.ndarray) -> np.ndarray:
    """``x`` clipped to [0, 1] (for rules whose source assumes rewards there)."""
    return np.clip(x, 0.0, 1.0)


def needs_horizon_or(value, horizon, what: str, owner: str) -> None:
    """Refuse a policy that has neither ``horizon`` nor an explicit ``what`` to tune from."""
    if value is None and horizon is None:
        raise InvalidParameterError(f"{owner} needs either 'horizon' or an explicit '{what}'.")
