"""Small numerical kernels the policies share: running means, KL-UCB indices, argmax with ties."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["kl_bernoulli", "kl_ucb_index", "argmax_random_ties", "sample_rows"]

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


def argmax_random_ties(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Row-wise argmax of ``values`` ``(n_runs, n_arms)``, breaking exact ties uniformly at random."""
    best = values.max(axis=1, keepdims=True)
    is_best = values == best
    # A uniform key on the tied entries only: argmax of (tied * U) picks one tied arm uniformly.
    keys = np.where(is_best, rng.random(values.shape) + 1.0, 0.0)
    return keys.argmax(axis=1)


def sample_rows(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per row of ``probs`` ``(n_runs, n_arms)`` by inverting the row's CDF."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random((probs.shape[0], 1)) * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=1), probs.shape[1] - 1)
