"""Off-policy value estimates from a randomised logging policy's decisions: IPS, SNIPS, DM and DR.

A log holds, for decision ``i``, the context ``x_i``, the logged action ``a_i``, the probability
``p_i = mu(a_i | x_i)`` with which the logging policy took it (its propensity) and the reward
``r_i``. A target policy is given by the probabilities ``pi(a | x_i)`` it puts on every action at
every logged context, ``(n, K)`` (one-hot for a deterministic rule). With ``w_i = pi(a_i | x_i) / p_i``:

- **IPS**, inverse propensity scoring (the Horvitz-Thompson estimator; Horvitz & Thompson, 1952):
  ``V = mean_i w_i r_i``, unbiased when every action the target can take had ``p > 0``;
- **SNIPS**, self-normalised IPS (Swaminathan & Joachims, 2015): ``V = sum_i w_i r_i / sum_i w_i``,
  slightly biased, much less variable when weights are large;
- **DM**, the direct method: ``V = mean_i sum_a pi(a | x_i) q(x_i, a)`` for a reward model ``q``;
  as good as ``q`` is, biased where ``q`` is wrong;
- **DR**, doubly robust (Dudik, Langford & Li, 2011, eq. 2):
  ``V = mean_i [sum_a pi(a | x_i) q(x_i, a) + w_i (r_i - q(x_i, a_i))]``, unbiased when the
  propensities are right, whatever ``q``, and less variable than IPS when ``q`` is good.

Standard errors are the sample standard deviation of the per-decision terms over ``sqrt(n)`` (the
delta method for SNIPS). :func:`cross_fitted_reward_model` fits ``q`` by ridge regression per
action on the contexts, each fold predicted by a fit on the other folds, so ``q(x_i, .)`` never
saw ``r_i``. Shapes: ``rewards``, ``actions``, ``propensities`` ``(n,)``; ``target`` and
``reward_model`` ``(n, K)``; ``contexts`` ``(n, d)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..core.validation import InvalidInputError

__all__ = ["Estimate", "ips", "snips", "direct_method", "doubly_robust", "cross_fitted_reward_model", "ridge_fit_predict", "ESTIMATORS"]


@dataclass(frozen=True)
class Estimate:
    """A policy value estimate with its standard error over ``n`` logged decisions.

    ``terms`` ``(n,)`` are the per-decision terms whose mean is ``value`` and whose standard
    deviation over ``sqrt(n)`` is ``stderr`` (for SNIPS, its linearisation).
    """

    value: float
    stderr: float
    n: int
    terms: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.zeros(0))


def _check(rewards, actions, propensities, target) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r = np.asarray(rewards, dtype=float)
    a = np.asarray(actions)
    p = np.asarray(propensities, dtype=float)
    pi = np.asarray(target, dtype=float)
    n = r.shape[0]
    if r.ndim != 1 or n < 2 or a.shape != (n,) or p.shape != (n,) or pi.ndim != 2 or pi.shape[0] != n:
        raise InvalidInputError(
            f"Off-policy estimates need rewards, actions and propensities of shape (n,) with n >= 2 and target (n, K). "
            f"Got {r.shape}, {a.shape}, {p.shape} and {pi.shape} instead."
        )
    if not np.issubdtype(a.dtype, np.integer) or np.any((a < 0) | (a >= pi.shape[1])):
        raise InvalidInputError(f"Logged actions must be ints in 0..{pi.shape[1] - 1}.")
    if not (np.all(np.isfinite(r)) and np.all(np.isfinite(pi))):
        raise InvalidInputError("Rewards and target probabilities must be finite.")
    if np.any(~np.isfinite(p) | (p <= 0) | (p > 1)):
        raise InvalidInputError("Propensities must lie in (0, 1]: a decision taken with probability 0 cannot be reweighted.")
    if np.any(pi < -1e-12) or not np.allclose(pi.sum(axis=1), 1.0, atol=1e-9):
        raise InvalidInputError("Each row of the target policy's probabilities must be a distribution over the actions.")
    return r, a.astype(np.int64), p, pi


def _mean_estimate(terms: np.ndarray) -> Estimate:
    return Estimate(float(terms.mean()), float(terms.std(ddof=1) / math.sqrt(terms.size)), int(terms.size), terms)


def _weights(a: np.ndarray, p: np.ndarray, pi: np.ndarray) -> np.ndarray:
    return pi[np.arange(a.size), a] / p


def ips(rewards, actions, propensities, target) -> Estimate:
    """Inverse propensity scoring (Horvitz-Thompson): ``mean_i w_i r_i``.

    >>> ips([1.0, 0.0, 1.0, 1.0], [0, 1, 0, 1], [0.5, 0.5, 0.5, 0.5], [[1, 0]] * 4)   # always action 0
    Estimate(value=1.0, stderr=0.57735, n=4)
    """
    r, a, p, pi = _check(rewards, actions, propensities, target)
    return _mean_estimate(_weights(a, p, pi) * r)


def snips(rewards, actions, propensities, target) -> Estimate:
    """Self-normalised IPS: ``sum_i w_i r_i / sum_i w_i``, standard error by the delta method.

    >>> snips([1.0, 0.0, 1.0, 1.0], [0, 1, 0, 1], [0.5, 0.5, 0.5, 0.5], [[1, 0]] * 4).value
    1.0
    """
    r, a, p, pi = _check(rewards, actions, propensities, target)
    w = _weights(a, p, pi)
    total = w.sum()
    if total <= 0:
        raise InvalidInputError("SNIPS is undefined: the target puts no probability on any logged action.")
    value = float((w * r).sum() / total)
    linearised = value + w * (r - value) / w.mean()  # mean: value; std / sqrt(n): the delta-method error
    return Estimate(value, float(linearised.std(ddof=1) / math.sqrt(r.size)), int(r.size), linearised)


def direct_method(rewards, actions, propensities, target, reward_model) -> Estimate:
    """The direct method: ``mean_i sum_a pi(a | x_i) q(x_i, a)`` (``rewards``, ``actions`` and ``propensities`` only checked)."""
    _, _, _, pi = _check(rewards, actions, propensities, target)
    q = _check_model(reward_model, pi.shape)
    return _mean_estimate((pi * q).sum(axis=1))


def doubly_robust(rewards, actions, propensities, target, reward_model) -> Estimate:
    """Doubly robust (Dudik, Langford & Li, 2011, eq. 2): ``mean_i [pi_i . q_i + w_i (r_i - q(x_i, a_i))]``.

    >>> q = [[0.9, 0.2]] * 4
    >>> doubly_robust([1.0, 0.0, 1.0, 1.0], [0, 1, 0, 1], [0.5] * 4, [[1, 0]] * 4, q).value   # 0.9 + mean(2 * 0.1 * [1, 0, 1, 0])
    1.0
    """
    r, a, p, pi = _check(rewards, actions, propensities, target)
    q = _check_model(reward_model, pi.shape)
    rows = np.arange(r.size)
    return _mean_estimate((pi * q).sum(axis=1) + _weights(a, p, pi) * (r - q[rows, a]))


def _check_model(reward_model, shape: tuple[int, int]) -> np.ndarray:
    q = np.asarray(reward_model, dtype=float)
    if q.shape != shape or not np.all(np.isfinite(q)):
        raise InvalidInputError(f"The reward model must be finite, of shape {shape}. Got {q.shape} instead.")
    return q


#: Name -> (estimator, whether it takes a reward model), in the order reports show them.
ESTIMATORS = {"ips": (ips, False), "snips": (snips, False), "dm": (direct_method, True), "dr": (doubly_robust, True)}


def ridge_fit_predict(X_train: np.ndarray, Y_train: np.ndarray, X_test: np.ndarray, alpha: float) -> np.ndarray:
    """Ridge regression with an intercept column: predictions at ``X_test``.

    ``X_train`` ``(m, d)``, ``Y_train`` ``(m,)`` or ``(m, k)``; solves ``(Z'Z + alpha I) W = Z'Y``
    with ``Z = [X, 1]``.

    >>> X = np.array([[0.0], [1.0], [2.0]]); y = np.array([1.0, 3.0, 5.0])
    >>> ridge_fit_predict(X, y, np.array([[3.0]]), alpha=1e-9).round(6).tolist()
    [7.0]
    """
    Z = np.hstack([X_train, np.ones((X_train.shape[0], 1))])
    A = Z.T @ Z + alpha * np.eye(Z.shape[1])
    W = np.linalg.solve(A, Z.T @ Y_train)
    return np.hstack([X_test, np.ones((X_test.shape[0], 1))]) @ W


def cross_fitted_reward_model(contexts, actions, rewards, n_arms: int, n_folds: int = 2, alpha: float = 1.0, seed: int = 0) -> np.ndarray:
    """``q(x_i, a)`` for every logged decision and action, ``(n, n_arms)``, by cross-fitted ridge per action.

    Decisions are split into ``n_folds`` random folds; each fold's ``q`` comes from per-action
    ridge fits (on the contexts, with an intercept) to the other folds' decisions that took that
    action. An action with fewer than two such decisions gets their mean reward (or the overall
    mean). ``contexts=None`` gives per-action means (a context-free model).
    """
    a = np.asarray(actions, dtype=np.int64)
    r = np.asarray(rewards, dtype=float)
    n = r.size
    X = np.zeros((n, 0)) if contexts is None else np.asarray(contexts, dtype=float)
    rng = np.random.default_rng(seed)
    folds = np.array_split(rng.permutation(n), max(2, min(n_folds, n)))
    q = np.empty((n, n_arms))
    for k, test in enumerate(folds):
        train = np.concatenate([f for j, f in enumerate(folds) if j != k])
        fallback = float(r[train].mean())
        for arm in range(n_arms):
            mine = train[a[train] == arm]
            if mine.size < 2:
                q[test, arm] = r[mine].mean() if mine.size else fallback
            else:
                q[test, arm] = ridge_fit_predict(X[mine], r[mine], X[test], alpha)
    return q
