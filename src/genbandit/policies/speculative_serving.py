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
  busy machine (ten times slower now and then) do not sway the choice; an arm with few rounds of
  its own borrows two rounds' weight of its drafter's pooled time (its other lengths).
- **Warm start.** The statistics carry from one response to the next. Tokens per round are carried
  close to a mean over responses (a response weighs as many rounds as the arm had in it, 4 at most:
  a copier pulled all along the copy-heavy responses would otherwise look good on every prompt,
  and a single lucky probe weighs one round), capped at ``memory`` rounds; round times as a mean
  over rounds, capped at ``memory`` rounds. Within a
  response the carried estimate
  counts as ``prior_rounds`` pulls at first and as ``prior_rounds / (1 + m)`` after ``m`` pulls of
  the arm in this response, so the response's own rounds override the prior within a few rounds
  when the prompt differs from the earlier ones (copy-heavy after free text).
- **Drift within a response.** The response's own rounds are discounted by ``discount`` per round
  (discounted UCB, Garivier and Moulines 2011), so an arm left after a few poor rounds early in a
  response (a copier before the text starts repeating) drifts back to its carried estimate and is
  tried again.
- **One round informs the shorter arms of its drafter.** Arms that share a drafter and differ in
  draft length see the same draft up to their length (each drafter's shorter draft is a prefix of
  its longer one), so a round of length ``k`` that accepted ``a`` draft tokens tells exactly what
  every shorter arm ``k' < k`` of that drafter would have emitted, ``min(a, k') + 1`` (given
  ``arm_lengths`` and ``arm_drafters``). The long and the short arm are then compared on the same
  rounds, not on different stretches of a response whose text changes as it goes.
- **Dominated arms drop out.** The index is ``rate_i + max_j rate_j (exploration sqrt(ln n / n_i)
  + 1 / (1 + N_i))``, ``N_i`` every round of the arm seen so far, optimism in units of the best rate: an arm resting on a round or two (a first
  response, an unlucky first draw) is tried again soon, an arm much slower than the best one over
  many responses is not pulled again, one within the noise now and then.

The simulator runs many servers in lockstep (one per run), each through a chain of responses, so
``begin_response(runs)`` starts a new response for the runs in ``runs`` only; a feedback key
``response_end`` (per run: this round completed the response) does the same from inside the loop.
A single run (the decoder, one server) is served by scalar Python instead, with the same formulas:
a round of a small model takes a millisecond or two, and numpy's per-call cost on arrays of a few
arms, dozens of calls per round, took a tenth of it.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any, Sequence

import numpy as np

from ..core.base import Policy
from ..core.registry import ENVIRONMENTS, register_policy
from ..core.validation import Interval, InvalidInputError, InvalidParameterError, check_finite_array

__all__ = ["WarmThroughputUCB"]

#: Pseudo-rounds of the drafter's pooled round time in an arm's time estimate.
_SHRINK = 2.0
#: The most rounds one response weighs in an arm's carried tokens per round.
_PER_RESPONSE = 4.0


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
    ``n_i = w_i + D^n_i``, its seconds per round ``exp((C^s_i + R^s_i + 2 g_i) / (C^n_i + R^n_i + 2))``
    with ``g_i`` the mean log time of all rounds of its drafter, its rate
    the ratio of the two, and its index ``rate_i + max_j rate_j (exploration sqrt(ln(n) / n_i) + 1 / (1 + N_i))``
    (``N_i = C^n_i + R^n_i``) with
    ``n = sum_i n_i``. An arm never pulled is played first. ``begin_response()`` folds the
    response into the carried sums (its tokens per round with a weight of ``min(m_i, 4)`` rounds,
    its round times as they came) and caps each arm's carried counts at ``memory`` (means kept), so older responses fade. With ``arm_lengths`` and ``arm_drafters``, a round of
    arm ``i`` (length ``k``, ``y`` tokens) also counts as a round of ``min(y - 1, k') + 1`` tokens,
    without time, for every arm of the same drafter with a length ``0 < k' < k``. ``reset()``
    forgets everything.

    Parameters
    ----------
    n_arms : int
    prior_rounds : float
        How many rounds the carried estimate counts as at the start of a response (at most).
    memory : float
        Cap on an arm's carried responses (tokens per round) and rounds (times).
    exploration : float
        Width of the UCB term of the bonus, in units of the best rate.
    discount : float
        Per-round discount of the response's own rounds in the estimates (1: none).
    arm_lengths, arm_drafters : sequences of one entry per arm, optional
        Each arm's draft length (0 for plain decoding) and drafter name; with them, a round also
        updates the tokens per round of its drafter's shorter arms (see above).

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

    def __init__(self, n_arms: int, prior_rounds: float = 8.0, memory: float = 30.0, exploration: float = 0.1, discount: float = 0.97,
                 arm_lengths: Sequence[int] | None = None, arm_drafters: Sequence[str] | None = None, seed=None) -> None:
        self.n_arms = n_arms
        self.prior_rounds = prior_rounds
        self.memory = memory
        self.exploration = exploration
        self.discount = discount
        self.arm_lengths = arm_lengths
        self.arm_drafters = arm_drafters
        self.seed = seed

    def _check_params(self) -> None:
        if (self.arm_lengths is None) != (self.arm_drafters is None):
            raise InvalidParameterError("Give both arm_lengths and arm_drafters, or neither.")
        if self.arm_lengths is not None and not (len(self.arm_lengths) == len(self.arm_drafters) == self.n_arms and min(self.arm_lengths) >= 0):
            raise InvalidParameterError(f"arm_lengths and arm_drafters need one entry per arm ({self.n_arms}), lengths >= 0. "
                                        f"Got {self.arm_lengths!r} and {self.arm_drafters!r} instead.")

    def _init_state(self, n_runs: int) -> None:
        # [..., 0] tokens, [..., 1] rounds they were observed in (own or counterfactual), [..., 2] log seconds, [..., 3] own pulls
        self._carried = np.zeros((n_runs, self.n_arms, 4))
        self._current = np.zeros((n_runs, self.n_arms, 4))  # this response, as observed
        self._recent = np.zeros((n_runs, self.n_arms, 4))  # this response, discounted
        # _shorter[i, j]: arm j drafts with arm i's drafter, fewer tokens (a prefix of arm i's draft)
        k = np.zeros(self.n_arms) if self.arm_lengths is None else np.asarray(self.arm_lengths, dtype=float)
        same = np.zeros((self.n_arms, self.n_arms), dtype=bool) if self.arm_drafters is None else \
            np.equal.outer(np.asarray(self.arm_drafters, dtype=object), np.asarray(self.arm_drafters, dtype=object))
        self._lengths = k
        self._shorter = same & (k[None, :] > 0) & (k[None, :] < k[:, None])
        self._group = (same | np.eye(self.n_arms, dtype=bool)).astype(float)  # arms pooled for the time prior
        # the same relations as Python lists, for the one-run path: per arm, its (shorter arm, length) pairs and its pool
        self._shorter_arms = [[(int(j), float(k[j])) for j in np.flatnonzero(row)] for row in self._shorter]
        self._pool = [[int(j) for j in np.flatnonzero(row)] for row in self._group]
        self._refresh(carried=True)

    def begin_response(self, runs: Any = None) -> None:
        """Start a new response for ``runs`` (indices or a boolean mask; all runs by default)."""
        self._ensure_state(single=False)
        rows = np.arange(self._n_runs) if runs is None else np.arange(self._n_runs)[np.asarray(runs)]
        current = self._current[rows].copy()
        # tokens per round: a response counts as _PER_RESPONSE rounds at most (its mean kept), so the prior is close to
        # a mean over responses, not over the rounds an arm happened to get (a copier pulled all along copy-heavy
        # responses would otherwise dominate), while a single probe counts for one round only
        current[..., :2] *= np.minimum(current[..., 1:2], _PER_RESPONSE) / np.maximum(current[..., 1:2], 1.0)
        total = self._carried[rows] + current
        for count, columns in ((1, [0, 1]), (3, [2, 3])):  # cap the carried responses / rounds at `memory`, means kept
            scale = np.where(total[..., count] > self.memory, self.memory / np.maximum(total[..., count], 1e-300), 1.0)
            total[..., columns] *= scale[..., None]
        self._carried[rows] = total
        self._current[rows] = 0.0
        self._recent[rows] = 0.0
        self._refresh(carried=True)

    def _estimates(self) -> tuple[np.ndarray, np.ndarray]:
        carried, current, recent = self._carried, self._current, self._recent
        prior = np.minimum(self.prior_rounds, carried[..., 1]) / (1.0 + current[..., 1])  # in rounds
        pulls = prior + recent[..., 1]
        tokens = prior * self._carried_tokens_per_round + recent[..., 0]
        rate = np.divide(tokens, pulls * self._seconds_per_round, out=np.zeros_like(tokens), where=self._timed)
        return rate, np.where(self._timed, pulls, 0.0)

    def _refresh(self, carried: bool) -> None:
        """Recompute the cached per-arm quantities (the carried ones only at a new response)."""
        if carried:
            self._carried_tokens_per_round = np.divide(self._carried[..., 0], self._carried[..., 1], out=np.zeros(self._carried.shape[:-1]),
                                                       where=self._carried[..., 1] > 0)
        seen = self._carried[..., 2:] + self._current[..., 2:]  # log seconds, own pulls
        # geometric mean of the arm's round times, shrunk towards its drafter's (all lengths pooled) while it has few;
        # no matrix product: a BLAS call wakes its thread pool, which costs more than a round of a small model
        pooled = (seen[..., :, None, :] * self._group[None, :, :, None]).sum(axis=1)
        self._seconds_per_round = np.exp((seen[..., 0] + _SHRINK * pooled[..., 0] / np.maximum(pooled[..., 1], 1e-300)) / (seen[..., 1] + _SHRINK))
        self._timed = seen[..., 1] > 0

    def rates(self) -> np.ndarray:
        """``(n_runs, n_arms)`` each arm's estimated tokens per second (0 before its first pull)."""
        self._ensure_state(single=False)
        return self._estimates()[0]

    def _select(self, contexts):
        if self._n_runs == 1:
            return np.array([self._select_one()])
        rate, pulls = self._estimates()
        total = np.maximum(pulls.sum(axis=1, keepdims=True), 2.0)
        # optimism in units of the best rate: the UCB term, plus 1 / (1 + N_i) for estimates resting on a round or two
        # (N_i: every round ever seen of the arm's tokens, carried included)
        seen = self._carried[..., 1] + self._current[..., 1]
        bonus = self.exploration * np.sqrt(np.log(total) / np.maximum(pulls, 1e-300)) + 1.0 / (1.0 + seen)
        index = np.where(pulls > 0, rate + rate.max(axis=1, keepdims=True) * bonus, np.inf)  # never pulled: first (lowest index)
        return index.argmax(axis=1)

    def _select_one(self) -> int:
        """``_select`` for a single run in scalar Python: a round of a small model takes about a millisecond, and a
        numpy call on arrays of a few arms costs a microsecond or more, dozens of them per round."""
        carried, current, recent = memoryview(self._carried), memoryview(self._current), memoryview(self._recent)
        per_round, seconds, timed = memoryview(self._carried_tokens_per_round), memoryview(self._seconds_per_round), memoryview(self._timed)
        rates, pulls, seen = [], [], []
        for i in range(self.n_arms):
            n_carried, n_current = carried[0, i, 1], current[0, i, 1]
            seen.append(n_carried + n_current)
            if not timed[0, i]:
                rates.append(0.0)
                pulls.append(0.0)
                continue
            prior = min(self.prior_rounds, n_carried) / (1.0 + n_current)
            n = prior + recent[0, i, 1]
            rates.append((prior * per_round[0, i] + recent[0, i, 0]) / (n * seconds[0, i]))
            pulls.append(n)
        log_total = math.log(max(sum(pulls), 2.0))
        best_rate = max(rates)
        best, best_index = 0, -math.inf
        for i, n in enumerate(pulls):
            if n <= 0.0:  # never pulled: first
                return i
            index = rates[i] + best_rate * (self.exploration * math.sqrt(log_total / n) + 1.0 / (1.0 + seen[i]))
            if index > best_index:
                best, best_index = i, index
        return best

    def _update_one(self, arm: int, tokens: float, seconds: float) -> None:
        """``_update`` for a single run in scalar Python (see :meth:`_select_one`): only the played arm, its
        drafter's shorter arms and the round times of its drafter's arms change."""
        carried, current, recent = memoryview(self._carried), memoryview(self._current), memoryview(self._recent)
        self._recent *= self.discount
        for field, value in enumerate((tokens, 1.0, math.log(seconds), 1.0)):
            recent[0, arm, field] += value
            current[0, arm, field] += value
        for j, length in self._shorter_arms[arm]:  # what the played drafter's shorter arms would have emitted
            counterfactual = min(tokens - 1.0, length) + 1.0
            for state in (recent, current):
                state[0, j, 0] += counterfactual
                state[0, j, 1] += 1.0
        pool = self._pool[arm]
        pooled_log = sum(carried[0, j, 2] + current[0, j, 2] for j in pool)
        pooled_rounds = sum(carried[0, j, 3] + current[0, j, 3] for j in pool)
        seconds_per_round = memoryview(self._seconds_per_round)
        for j in pool:
            seen_log, seen_rounds = carried[0, j, 2] + current[0, j, 2], carried[0, j, 3] + current[0, j, 3]
            seconds_per_round[0, j] = math.exp((seen_log + _SHRINK * pooled_log / max(pooled_rounds, 1e-300)) / (seen_rounds + _SHRINK))
        self._timed[0, arm] = True

    def _update(self, actions, feedback, contexts):
        if self._n_runs == 1:
            self._update_one(int(actions[0]), float(feedback["tokens"][0]), float(feedback["seconds"][0]))
            if "response_end" in feedback and feedback["response_end"][0]:
                self.begin_response()
            return
        rows = np.arange(actions.shape[0])
        tokens = feedback["tokens"]
        own = np.stack([tokens, np.ones(rows.shape[0]), np.log(feedback["seconds"]), np.ones(rows.shape[0])], axis=1)
        self._recent *= self.discount
        self._recent[rows, actions] += own
        self._current[rows, actions] += own
        shorter = self._shorter[actions]
        if shorter.any():  # what the played drafter's shorter arms would have emitted: min(accepted, k) + 1
            counterfactual = np.where(shorter, np.minimum(tokens[:, None] - 1.0, self._lengths[None, :]) + 1.0, 0.0)
            for state in (self._recent, self._current):
                state[..., 0] += counterfactual
                state[..., 1] += shorter
        self._refresh(carried=False)
        if "response_end" in feedback:
            ended = np.asarray(feedback["response_end"]) != 0
            if ended.any():
                self.begin_response(ended)

    def _check_feedback(self, feedback, actions):
        if not isinstance(feedback, dict):
            tokens = check_finite_array("reward", feedback, (self._n_runs,), type(self).__name__)
            feedback = {"tokens": tokens, "seconds": np.ones_like(tokens)}
        if not {"tokens", "seconds"} <= set(feedback) <= {"tokens", "seconds", "response_end"}:
            raise InvalidInputError(f"The feedback of {type(self).__name__} is {{'tokens': y, 'seconds': s}} per round "
                                    f"(and optionally 'response_end'). Got {feedback!r} instead.")
        tokens = check_finite_array("tokens", feedback["tokens"], (self._n_runs,), type(self).__name__)
        seconds = check_finite_array("seconds", feedback["seconds"], (self._n_runs,), type(self).__name__)
        if np.any((tokens < 0) | (tokens > self.reward_range[1])) or np.any(seconds <= 0):
            raise InvalidInputError(f"{type(self).__name__} needs tokens >= 0 and seconds > 0 per round. Got {feedback!r} instead.")
        checked = {"tokens": tokens, "seconds": seconds}
        if "response_end" in feedback:
            checked["response_end"] = check_finite_array("response_end", feedback["response_end"], (self._n_runs,), type(self).__name__) != 0
        return checked

    @classmethod
    def _check_examples(cls):
        TGDArms = ENVIRONMENTS.get("TGDArms")

        return [(cls(n_arms=3, seed=0), TGDArms(accept=[0.3, 0.6, 0.8], max_length=4, response_length=64, seed=1))]
