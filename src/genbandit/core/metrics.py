"""What metric functions share: the per-run total of a quantity the environment reported.

A metric is ``fn(result, env, policy) -> array (n_runs,) | float``, registered by name with
:func:`genbandit.core.registry.register_metric` next to the environment or family that reports
what it needs through ``Step.info``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .validation import InvalidParameterError

__all__ = ["reported_total"]


def reported_total(result: Any, key: str, metric: str) -> np.ndarray:
    """``result.totals[key]``, the sum over rounds of ``Step.info[key]``, or a clear error naming ``metric``."""
    if key not in result.totals:
        raise InvalidParameterError(f"The metric {metric!r} needs the environment to report '{key}' in Step.info.")
    return result.totals[key]
