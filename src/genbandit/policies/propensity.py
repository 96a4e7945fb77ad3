"""The probability with which a policy takes each action next: exact where it says, else Monte Carlo.

Off-policy evaluation reweights logged decisions by the probability the logging policy gave them
(the propensity), and needs the probabilities a target policy would give. A randomised policy
that chooses through an explicit distribution (EXP3, uniform random...) exposes it through
``Policy.probabilities``; for the others (Thompson sampling draws from its posterior, UCB rules
break ties at random) :func:`action_probabilities` estimates it by repeating ``select`` on the
policy's current state, then puts the policy's RNG and attributes back, so the next real
``select`` is the one it would have been.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

import numpy as np

from ..core.base import Policy
from ..core.validation import InvalidParameterError

__all__ = ["action_probabilities"]


def action_probabilities(policy: Policy, context: Any = None, n_draws: int = 256, agree: int = 16) -> np.ndarray:
    """The distribution of ``policy.select(context)``, ``(n_arms,)``.

    Exact when the policy exposes ``probabilities``. Otherwise the frequencies of ``n_draws``
    selects from the current state (for Thompson sampling: ``n_draws`` posterior draws, standard
    error at most ``0.5 / sqrt(n_draws)`` per action); when the first ``agree`` draws all pick the
    same action the rule is taken as deterministic there and that action gets probability 1 (an
    action the policy takes with probability above 0.17 shows up in 16 draws 19 times in 20).

    >>> from genbandit.policies.classic import EXP3, ThompsonSampling
    >>> action_probabilities(EXP3(n_arms=2, seed=0)).tolist()
    [0.5, 0.5]
    >>> ts = ThompsonSampling(n_arms=2, seed=0)
    >>> for _ in range(20):
    ...     _ = ts.update(0, 1.0); _ = ts.update(1, 0.0)
    >>> action_probabilities(ts).tolist(), ts.select() == ThompsonSampling.from_state_dict(ts.state_dict()).select()
    ([1.0, 0.0], True)
    """
    for name, value in (("n_draws", n_draws), ("agree", agree)):
        if not isinstance(value, Integral) or isinstance(value, bool) or value < 1:
            raise InvalidParameterError(f"The {name!r} parameter of action_probabilities must be a positive int. Got {value!r} instead.")
    exact = policy.probabilities(context)
    if exact is not None:
        return np.asarray(exact, dtype=float)
    saved_vars = dict(vars(policy))
    saved_rng = policy._rng.bit_generator.state
    try:
        draws = [policy.select(context) for _ in range(min(agree, n_draws))]
        if len(set(draws)) > 1:
            draws += [policy.select(context) for _ in range(n_draws - len(draws))]
    finally:
        vars(policy).clear()
        vars(policy).update(saved_vars)
        policy._rng.bit_generator.state = saved_rng
    return np.bincount(np.asarray(draws, dtype=np.int64), minlength=policy.n_arms) / len(draws)
