"""The truncated geometric law TGD(p, L) of speculative decoding's accepted tokens (Hou et al. 2025, sec. 4).

A round drafts ``L`` tokens; each is accepted with probability ``p`` until the first rejection, and
the target model adds one token, so a round emits ``Y in {1, ..., L+1}``.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from ..core.validation import InvalidParameterError

__all__ = ["tgd_mean", "tgd_accept_for_mean", "draw_tgd"]


def tgd_mean(p, length):
    """Mean of the truncated geometric law TGD(p, L): ``(1 - p^(L+1)) / (1 - p)`` (paper eq. 130).

    >>> round(tgd_mean(0.5, 4), 4)
    1.9375
    """
    p = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(p < 1, (1 - p ** (length + 1)) / (1 - np.where(p < 1, p, 0.0)), length + 1.0)
    return float(mean) if mean.ndim == 0 else mean


def tgd_accept_for_mean(mean: float, length: int) -> float:
    """The acceptance ``p`` with ``E[TGD(p, L)] = mean`` (solved numerically, e.g. 3.94 at L=6 -> 0.7989).

    >>> round(tgd_accept_for_mean(3.94, 6), 4)
    0.7989
    """
    if not 1.0 <= mean < length + 1:
        raise InvalidParameterError(f"A TGD mean lies in [1, L+1) = [1, {length + 1}). Got {mean!r} instead.")
    if mean == 1.0:
        return 0.0
    return float(brentq(lambda p: tgd_mean(p, length) - mean, 0.0, 1.0 - 1e-12, xtol=1e-13))


def draw_tgd(rng: np.random.Generator, p: np.ndarray, length) -> np.ndarray:
    """``1 + min(G, L)`` with ``P(G = k) = p^k (1 - p)``: the tokens of one round (accepted + bonus)."""
    p = np.minimum(np.asarray(p, dtype=float), 1.0 - 1e-12)
    accepted = rng.geometric(1.0 - p) - 1
    return 1 + np.minimum(accepted, length)
