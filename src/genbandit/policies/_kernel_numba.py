"""Compiled decision of RFF-UCB for one run (numba): a whole ``select`` and a whole ``update`` in one call each.

RFF-UCB (Hu, Leung & Farnia 2025, Algorithms 4-5) spends a decision on three products: the
features ``phi(y)`` (one ``D x d`` product), ``h_g = A_g^-1 phi`` for every arm (``G`` products
of ``F x F``) and, after the feedback, the Sherman-Morrison step on the played arm. With one
run (a router, a replay) numpy's per-call overhead on these small arrays costs more than the
arithmetic, so :class:`~genbandit.policies.kernel.RFFUCB` hands them to the functions below
when it holds one run. They read and write the policy's own arrays (the same ``A_g^-1``, ``b_g``
and counts as the batched path) and compute the same quantities in the same order of operations
as that path, except the order of summation inside dot products; the choice of arm (ties
broken by the same uniforms from the policy's generator) agrees with the batched path round
for round (``tests/test_kernel.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["features_and_h", "rff_ucb_index", "rff_ucb_choose", "rff_ucb_select", "rff_ucb_update"]

# reassociation lets the dot products vectorise; no flag that assumes finite values (untried arms are +inf)
_LINALG = {"reassoc", "contract"}


@njit(cache=True, fastmath=_LINALG)
def _dot(u, v):  # pragma: no cover - compiled
    s = 0.0
    for k in range(u.shape[0]):
        s += u[k] * v[k]
    return s


@njit(cache=True, fastmath=_LINALG)
def features_and_h(omega, phase, cos_sin, y, Ainv, f, h):  # pragma: no cover - compiled
    """Fill ``f`` with ``phi(y)`` (eq. 1 or footnote 2) and ``h[g]`` with ``A_g^-1 phi`` for every arm."""
    n_freq = omega.shape[0]
    if cos_sin:
        root = math.sqrt(n_freq)
        for j in range(n_freq):
            proj = _dot(omega[j], y)
            f[j] = math.cos(proj) / root
            f[n_freq + j] = math.sin(proj) / root
    else:
        scale = math.sqrt(2.0 / n_freq)
        for j in range(n_freq):
            f[j] = scale * math.cos(_dot(omega[j], y) + phase[j])
    for g in range(Ainv.shape[0]):
        for i in range(Ainv.shape[1]):
            h[g, i] = _dot(Ainv[g, i], f)


@njit(cache=True)
def rff_ucb_index(f, h, b, counts, feature_sums, score_sums, center, eta, index):  # pragma: no cover - compiled
    """Fill ``index[g]`` with ``mu_g + eta sigma_g`` from ``phi`` and ``A_g^-1 phi`` (untried arms +inf)."""
    for g in range(h.shape[0]):
        if counts[g] == 0:
            index[g] = np.inf
            continue
        mu = _dot(h[g], b[g])
        if center:
            mu = mu + score_sums[g] / counts[g] * (1.0 - _dot(h[g], feature_sums[g]))
        index[g] = mu + eta * math.sqrt(max(_dot(h[g], f), 0.0))


@njit(cache=True)
def rff_ucb_choose(f, h, b, counts, feature_sums, score_sums, center, eta, ties):  # pragma: no cover - compiled
    """The arm of largest ``mu_g + eta sigma_g`` (untried arms +inf); exact ties to the largest uniform in ``ties``."""
    n_arms = h.shape[0]
    index = np.empty(n_arms)
    rff_ucb_index(f, h, b, counts, feature_sums, score_sums, center, eta, index)
    top = index.max()
    arm, best_tie = 0, 0.0
    for g in range(n_arms):  # as argmax_random_ties: the first largest ``ties + 1`` among the best
        if index[g] == top and ties[g] + 1.0 > best_tie:
            arm, best_tie = g, ties[g] + 1.0
    return arm


@njit(cache=True)
def rff_ucb_select(omega, phase, cos_sin, y, Ainv, b, counts, feature_sums, score_sums, center, eta, ties, f, h):  # pragma: no cover - compiled
    """A whole ``select`` in one call: :func:`features_and_h` into ``f`` and ``h`` (kept for the ``update``), then :func:`rff_ucb_choose`."""
    features_and_h(omega, phase, cos_sin, y, Ainv, f, h)
    return rff_ucb_choose(f, h, b, counts, feature_sums, score_sums, center, eta, ties)


@njit(cache=True, fastmath=_LINALG)
def _rank_one_down(A, h, coef):  # pragma: no cover - compiled
    """``A <- A - coef h h'`` in place, row by row (``A`` symmetric, C-ordered)."""
    for i in range(h.shape[0]):
        scaled = -coef * h[i]
        row = A[i]
        for j in range(h.shape[0]):
            row[j] += scaled * h[j]


@njit(cache=True)
def rff_ucb_update(Ainv, b, counts, feature_sums, score_sums, center, arm, reward, f, h):  # pragma: no cover - compiled
    """Sherman-Morrison on the played arm, in place: ``A^-1 <- A^-1 - h h' / (1 + phi'h)``, ``b <- b + r phi``."""
    _rank_one_down(Ainv[arm], h[arm], 1.0 / (1.0 + _dot(f, h[arm])))
    for k in range(f.shape[0]):
        b[arm, k] += reward * f[k]
    counts[arm] += 1
    if center:
        for k in range(f.shape[0]):
            feature_sums[arm, k] += f[k]
        score_sums[arm] += reward
