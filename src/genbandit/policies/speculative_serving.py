"""A serving policy for speculative decoding: tokens per second, learned across responses.

BanditSpec (Hou et al., ICML 2025) starts every response with an empty state (Algorithm 3) and
rewards a round by the tokens it emits (section 2). A server sees response after response, and its
arms differ in time per round as much as in tokens per round (a model drafter's round costs its own
forward passes and its cache catch-up, a copier's costs almost nothing), so
:class:`WarmThroughputUCB` changes both:

- **Objective: tokens per second.** Each round reports the tokens it emitted *and* its wall time;
  the policy estimates every arm's rate as its tokens per round over its seconds per round (the
  rate of a renewal-reward process) and plays the arm of largest optimistic rate. Tokens per round
  depend on the prompt and are learned per response (below); seconds per round are a property of
  the arm (its drafter's cost, the verification of its draft length, cache catch-up) and are
  averaged over everything seen, geometrically, so that the rounds of a process preempted on a
  busy machine (ten times slower now and then) do not sway the choice.
- **Warm start.** The statistics carry from one response to the next: at the start of a response
  each arm's carried pulls are capped at ``memory`` (its mean kept), and within the response they
  count as ``prior_rounds`` pulls at first and as ``prior_rounds / (1 + m)`` after ``m`` pulls of
  the arm in this response, so the response's own rounds override the prior within a few rounds
  when the prompt differs from the earlier ones (copy-heavy after free text).
- **Drift within a response.** The response's own rounds are discounted by ``discount`` per round
  (discounted UCB, Garivier and Moulines 2011), so an arm left after a few poor rounds early in a
  response (a copier before the text starts repeating) drifts back to its carried estimate and is
  tried again.
- **Dominated arms drop out.** The optimism is relative, ``rate (1 + exploration sqrt(ln n / n_i))``
  with ``n_i`` the arm's effective pulls: an arm much slower than the best one has a bonus too
  small to be pulled again, while an arm within the noise keeps being tried now and then.

The simulator runs many responses in lockstep (one per run), so ``begin_response(runs)`` starts a
new response for the runs in ``runs`` only.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

import numpy as np

from ..core.base import Policy
from ..core.registry import register_policy
from ..core.validation import Interval, InvalidInputError, check_finite_array

__all__ = ["WarmThroughputUCB"]


@register_policy("warm-throughput-ucb")
class WarmThroughputUCB(Policy):
    """Upper confidence bound on tokens per second, warm-started from earlier responses.

    ``update(arm, {"tokens": y, "seconds": s})``: the round emitted ``y >= 1`` tokens in ``s > 0``
    seconds. A bare number ``y`` counts as ``{"tokens": y, "seconds": 1}`` (a simulator that reports
    no time: the rate is then tokens per round). Per arm ``i`` the policy keeps carried sums
    (tokens ``C^y_i``, log seconds ``C^s_i``, pulls ``C^n_i``) from earlier responses and the current
    response's sums discounted by ``discount`` per round, ``D_i``, and undiscounted, ``R_i``. With
    ``m_i = R^n_i`` and ``w_i = min(prior_rounds, C^n_i) / (1 + m_i)`` (the carried evidence in
    pulls), the arm's tokens per round are ``(w_i C^y_i / C^n_i + D^y_i) / n_i`` with
    ``n_i = w_i + D^n_i``, its seconds per round ``exp((C^s_i + R^s_i) / (C^n_i + R^n_i))``, its rate
    the ratio of the two, and its index ``rate_i (1 + exploration sqrt(ln(n) / n_i))`` with
    ``n = sum_i n_i``. An arm never pulled is played first. ``begin_response()`` folds the
    response (undiscounted) into the carried sums and caps each arm's carried pulls at ``memory``
    (means kept), so older responses fade. ``reset()`` forgets everything.

    Parameters
    ----------
    n_arms : int
    prior_rounds : float
        How many rounds the carried estimate counts as at the start of a response (at most).
    memory : float
        Cap on an arm's carried pulls (its weight against new responses).
    exploration : float
        Relative width of the optimism bonus (0: greedy on the rate estimates).
    discount : float
        Per-round discount of the response's own rounds in the estimates (1: none).

    Examples
    --------
    >>> from genbandit.policies.speculative_serving import WarmThroughputUCB
    >>> policy = WarmThroughputUCB(n_arms=2, seed=0)
    >>> # arm 0 emits 4 tokens in 10 ms, arm 1 emits 6 tokens in 30 ms: arm 0 is faster per second
    >>> for arm, y, s in [(0, 4, 0.010), (1, 6, 0.030)] * 3:
    ...     _ = policy.update(arm, {"tokens": y, "seconds": s})
    >>> policy.rates().round(1).tolist()
    [[400.0, 200.0]]
    >>> policy.select()
    0
    >>> policy.begin_response()  # the next response starts from what was learned
    >>> policy.select()
    0
    """

    name = "WarmThroughputUCB"
    #: ``update`` takes ``{"tokens": ..., "seconds": ...}`` per round.
    feedback_keys = ("tokens", "seconds")
    #: The range of a bare-number feedback (tokens of a round of unit duration).
    reward_range = (0.0, 1e6)
    _parameter_constraints = {
        "prior_rounds": [Interval(Real, 0, None, "left")],
        "memory": [Interval(Real, 0, None, "neither")],
        "exploration": [Interval(Real, 0, None, "left")],
        "discount": [Interval(Real, 0, 1, "right")],
    }

    def __init__(self, n_arms: int, prior_rounds: float = 8.0, memory: float = 30.0, exploration: float = 0.2, discount: float = 0.97,
                 seed=None) -> None:
        self.n_arms = n_arms
        self.prior_rounds = prior_rounds
        self.memory = memory
        self.exploration = exploration
        self.discount = discount
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        # [..., 0] tokens, [..., 1] log seconds, [..., 2] pulls
        self._carried = np.zeros((n_runs, self.n_arms, 3))
        self._current = np.zeros((n_runs, self.n_arms, 3))  # this response, as observed
        self._recent = np.zeros((n_runs, self.n_arms, 3))  # this response, discounted

    def begin_response(self, runs: Any = None) -> None:
        """Start a new response for ``runs`` (indices or a boolean mask; all runs by default)."""
        self._ensure_state(single=False)
        rows = np.arange(self._n_runs) if runs is None else np.arange(self._n_runs)[np.asarray(runs)]
        total = self._carried[rows] + self._current[rows]
        pulls = total[..., 2]
        scale = np.where(pulls > self.memory, self.memory / np.maximum(pulls, 1e-300), 1.0)
        self._carried[rows] = total * scale[..., None]
        self._current[rows] = 0.0
        self._recent[rows] = 0.0

    def _estimates(self) -> tuple[np.ndarray, np.ndarray]:
        carried, current, recent = self._carried, self._current, self._recent
        prior = np.minimum(self.prior_rounds, carried[..., 2]) / (1.0 + current[..., 2])  # in pulls
        pulls = prior + recent[..., 2]
        weight = prior / np.maximum(carried[..., 2], 1e-300)
        tokens_per_round = (weight * carried[..., 0] + recent[..., 0]) / np.maximum(pulls, 1e-300)
        seen = carried + current
        seconds_per_round = np.exp(seen[..., 1] / np.maximum(seen[..., 2], 1e-300))  # geometric mean
        rate = np.where(pulls > 0, tokens_per_round / seconds_per_round, 0.0)
        return rate, pulls

    def rates(self) -> np.ndarray:
        """``(n_runs, n_arms)`` each arm's estimated tokens per second (0 before its first pull)."""
        self._ensure_state(single=False)
        return self._estimates()[0]

    def _select(self, contexts):
        rate, pulls = self._estimates()
        total = np.maximum(pulls.sum(axis=1, keepdims=True), 2.0)
        bonus = np.sqrt(np.log(total) / np.maximum(pulls, 1e-300))
        index = np.where(pulls > 0, rate * (1.0 + self.exploration * bonus), np.inf)  # never pulled: first (lowest index)
        return index.argmax(axis=1)

    def _update(self, actions, feedback, contexts):
        rows = np.arange(actions.shape[0])
        round_ = np.stack([feedback["tokens"], np.log(feedback["seconds"]), np.ones(rows.shape[0])], axis=1)
        self._current[rows, actions] += round_
        self._recent *= self.discount
        self._recent[rows, actions] += round_

    def _check_feedback(self, feedback, actions):
        if not isinstance(feedback, dict):
            tokens = check_finite_array("reward", feedback, (self._n_runs,), type(self).__name__)
            feedback = {"tokens": tokens, "seconds": np.ones_like(tokens)}
        if set(feedback) != {"tokens", "seconds"}:
            raise InvalidInputError(f"The feedback of {type(self).__name__} is {{'tokens': y, 'seconds': s}} per round. Got {feedback!r} instead.")
        tokens = check_finite_array("tokens", feedback["tokens"], (self._n_runs,), type(self).__name__)
        seconds = check_finite_array("seconds", feedback["seconds"], (self._n_runs,), type(self).__name__)
        if np.any((tokens < 0) | (tokens > self.reward_range[1])) or np.any(seconds <= 0):
            raise InvalidInputError(f"{type(self).__name__} needs tokens >= 0 and seconds > 0 per round. Got {feedback!r} instead.")
        return {"tokens": tokens, "seconds": seconds}

    @classmethod
    def _check_examples(cls):
        from ..envs.speculative import TGDArms

        return [(cls(n_arms=3, seed=0), TGDArms(accept=[0.3, 0.6, 0.8], max_length=4, response_length=64, seed=1))]
