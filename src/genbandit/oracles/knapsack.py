"""Integer knapsack with bounded multiplicities by dynamic programming over capacity.

``solve_knapsack(values, weights, capacity, bounds)`` maximises ``values . a`` subject to
``weights . a <= capacity`` and ``0 <= a_i <= bounds_i`` (integers), for a batch of value
vectors at once (Kellerer, Pferschy & Pisinger 2004, ch. 7). Pseudo-polynomial: ``O(d W b)``
array operations, each over the batch.
"""

from __future__ import annotations

import numpy as np

from ..core.validation import InvalidParameterError

__all__ = ["solve_knapsack", "knapsack_table"]


def _check(weights, capacity, bounds) -> tuple[np.ndarray, int, np.ndarray]:
    w = np.asarray(weights)
    if w.ndim != 1 or np.any(w < 1) or np.any(w != np.round(w)):
        raise InvalidParameterError(f"weights must be positive integers. Got {weights!r} instead.")
    if int(capacity) != capacity or capacity < 0:
        raise InvalidParameterError(f"capacity must be a non-negative integer. Got {capacity!r} instead.")
    w = w.astype(np.int64)
    cap = int(capacity)
    b = cap // w if bounds is None else np.minimum(np.asarray(bounds, dtype=np.int64), cap // w)
    return w, cap, b


def knapsack_table(gains: np.ndarray, weights, capacity: int) -> np.ndarray:
    """Maximise ``sum_i gains[r, i, a_i]`` subject to ``weights . a <= capacity`` for every row ``r``.

    ``gains`` ``(n_rows, d, b_max + 1)`` is the value of taking ``k`` units of item ``i``
    (``-inf`` where ``k`` is not allowed; ``gains[:, :, 0] = 0``). Returns ``a`` ``(n_rows, d)``.
    Ties go to the fewest units of the earliest items.
    """
    w = np.asarray(weights, dtype=np.int64)
    n_rows, d, kmax = gains.shape
    best = np.zeros((n_rows, capacity + 1))
    choice = np.zeros((d, n_rows, capacity + 1), dtype=np.int64)
    for i in range(d):
        new = best.copy()
        pick = np.zeros((n_rows, capacity + 1), dtype=np.int64)
        for k in range(1, kmax):
            if k * w[i] > capacity:
                break
            g = gains[:, i, k]
            if not np.any(np.isfinite(g)):
                continue
            cand = np.full_like(best, -np.inf)
            cand[:, k * w[i]:] = best[:, : capacity + 1 - k * w[i]] + g[:, None]
            better = cand > new + 1e-12
            new = np.where(better, cand, new)
            pick = np.where(better, k, pick)
        choice[i] = pick
        best = new
    a = np.zeros((n_rows, d), dtype=np.int64)
    c = np.full(n_rows, capacity)
    rows = np.arange(n_rows)
    for i in range(d - 1, -1, -1):
        k = choice[i, rows, c]
        a[:, i] = k
        c = c - k * w[i]
    return a


def solve_knapsack(values, weights, capacity, bounds=None) -> np.ndarray:
    """Best bounded integer knapsack for each row of ``values`` ``(n_rows, d)`` (or one ``(d,)`` vector).

    Items of non-positive value are never taken.

    >>> solve_knapsack([3.0, 4.0, 0.5], [2, 3, 1], 7).tolist()
    [2, 1, 0]
    >>> solve_knapsack([3.0, 4.0, 0.5], [2, 3, 1], 7, bounds=[1, 3, 1]).tolist()
    [0, 2, 1]
    """
    w, cap, b = _check(weights, capacity, bounds)
    vals = np.asarray(values, dtype=float)
    single = vals.ndim == 1
    vals = np.atleast_2d(vals)
    if vals.shape[1] != w.size or not np.all(np.isfinite(vals)):
        raise InvalidParameterError(f"values must be finite with {w.size} columns. Got shape {vals.shape} instead.")
    kmax = int(b.max()) if b.size else 0
    k = np.arange(kmax + 1)
    gains = vals[:, :, None] * k[None, None, :]
    gains = np.where((k[None, :] <= b[:, None])[None], gains, -np.inf)
    a = knapsack_table(gains, w, cap)
    return a[0] if single else a
