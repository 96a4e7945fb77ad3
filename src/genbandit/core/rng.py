"""Random number generators: one function builds them, one derives independent streams.

Every stochastic object owns a :class:`numpy.random.Generator` built here from its ``seed``;
nothing in genbandit touches NumPy's global state.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

from .validation import InvalidParameterError

__all__ = ["check_random_state", "spawn_seeds"]


def check_random_state(seed: None | int | np.random.Generator | np.random.SeedSequence) -> np.random.Generator:
    """Turn ``seed`` into a :class:`numpy.random.Generator`.

    ``None`` gives fresh OS entropy, an int or a ``SeedSequence`` a reproducible PCG64 stream, and a
    ``Generator`` is returned as it is (shared, not copied).

    >>> float(check_random_state(0).random())
    0.6369616873214543
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    if isinstance(seed, Integral) and not isinstance(seed, bool) and seed >= 0:
        return np.random.default_rng(int(seed))
    raise InvalidParameterError(f"seed must be None, a non-negative int, a SeedSequence or a Generator. Got {seed!r} instead.")


def spawn_seeds(seed: None | int | np.random.SeedSequence, n: int) -> list[np.random.SeedSequence]:
    """Derive ``n`` independent child seeds from ``seed`` (``SeedSequence.spawn``)."""
    if isinstance(seed, np.random.SeedSequence):
        return seed.spawn(n)
    if seed is not None and not (isinstance(seed, Integral) and not isinstance(seed, bool) and seed >= 0):
        raise InvalidParameterError(f"seed must be None or a non-negative int. Got {seed!r} instead.")
    return np.random.SeedSequence(seed).spawn(n)
