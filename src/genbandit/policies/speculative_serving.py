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
  averaged over everything seen, geometrically, each round counting as at most twice the arm's
  current estimate, so that the rounds of a process preempted on a busy machine (several times
  slower now and then) do not sway the choice. An arm with few rounds of its own borrows two rounds'
  weight of its drafter's time, as a hierarchical model's posterior mean is shrunk (Gelman et al.,
  *Bayesian Data Analysis*, section 5.4), so an arm whose first round was preempted is not written
  off on it, and an arm with no round of its own takes its drafter's. A round of length ``k``
  verifies ``k + 1`` positions in one target pass and drafts ``k`` tokens, so its time grows with
  ``k`` from plain decoding's: the drafter's time for its arm of length ``k`` is ``t_0 + k s``,
  ``t_0`` plain decoding's round time and ``s`` the drafter's time per drafted token, measured on
  whichever of its lengths were played. A draft model timed once at length 6 thus prices its length
  3 between plain decoding and its length 6, where pooling all its rounds with every arm's (the
  copiers' rounds cost little) priced it near a copier's round: on the demo's first response the
  draft model was played 2.1 times per fresh chain with the pooled time, 1.0 with this. Before
  plain decoding or the drafter has a timed round (and for arms given without lengths), the
  drafter's time is its arms' rounds pooled, shrunk by two rounds' weight towards every arm's.
- **Warm start.** The statistics carry from one response to the next. Tokens per round are carried
  close to a mean over responses (a response weighs as many rounds as the arm had in it, 4 at most:
  a copier pulled all along the copy-heavy responses would otherwise look good on every prompt,
  and a single lucky probe weighs one round), capped at ``memory`` rounds; round times as a mean
  over rounds, capped at ``memory`` rounds. Within a response the carried estimate counts as
  ``prior_rounds`` pulls at first and as ``prior_rounds / (1 + m)`` after ``m`` rounds of the arm
  in this response, so the response's own rounds override the prior within a few rounds when the
  prompt differs from the earlier ones (copy-heavy after free text).
- **Drift within a response.** The response's own rounds are discounted by ``discount`` per round
  (discounted UCB, Garivier and Moulines 2011), so an arm left after a few poor rounds early in a
  response (a copier before the text starts repeating) drifts back to its carried estimate and is
  tried again; a copier is also seen to match again without being played (side observations, below).
- **A drafter's lengths share one acceptance curve.** Arms of one drafter differ only in draft
  length and a shorter draft is a prefix of a longer one: with ``A`` the number of draft tokens
  the target accepts, an arm of length ``k`` emits ``min(A, k) + 1`` tokens. A round of length
  ``k`` that accepted ``a`` tokens tells exactly what every shorter arm would have emitted, and
  for a longer arm it is censored at ``k`` when ``a = k``. So tokens per round are estimated as the
  product-limit estimator does for censored data (Kaplan and Meier, 1958), shortest arm first: an
  arm ``i`` whose drafter's next shorter arm is ``p`` has ``T_i = T_p + S_p G_i`` and
  ``S_i = S_p H_i``, where ``T_p`` and ``S_p`` (the share of rounds with ``A >= k_p``) come from
  every round of length ``>= k_p``, and ``G_i`` (the mean of ``min(A, k_i) - k_p``) and ``H_i``
  (the share with ``A >= k_i``) from the rounds of length ``>= k_i`` that reached ``A >= k_p``.
  A longer arm is thus never estimated below its shorter arm, what it adds rests only on rounds
  long enough to show it (a shorter arm's rounds cannot extinguish it), and the shorter arm's full
  acceptances raise it through ``S_p``: an arm locked in at a short length keeps the longer one
  in reach. Rounds of plain decoding, or of arms given without lengths, are a plain mean.
- **Side observations** (Mannor and Shamir, 2011): a copier's draft is a function of the text and
  costs microseconds, so the decoder takes it at the start of every round that does not play the
  copier's longest arm and, once the text covers or refutes it, tells the policy what that arm
  would have emitted there (:meth:`WarmThroughputUCB.observe`; when the copier itself played a
  shorter arm, the observation counts only for its longer arms): exactly under greedy decoding, and
  in law under sampling, where the verifier keeps a point-mass draft's token ``x`` with probability
  ``P(x)``, the probability that the lossless text's token is ``x`` (Leviathan et al., 2023). Every
  such round is observed, whatever the played arm emitted: comparing only when the round's tokens
  covered the copier's draft selected the rounds where the text was easy to predict and overrated
  the idle copier.
- **A copier with nothing to copy is asleep** (sleeping bandits: Kleinberg, Niculescu-Mizil and
  Sharma, 2010, whose AUER plays the awake arm of largest upper confidence bound). A copier
  whose index holds no match for the text's end drafts nothing, so its round would be a plain
  round: one token at the verification cost of one token. Its draft is free to know before the
  choice, so the decoder takes every copier's draft at the start of the
  round and the policy chooses among the arms that can draft there (``_play``'s ``asleep``); the
  copier is neither played nor observed in a round it sleeps through. Its statistics are then
  its tokens and seconds per round *when it has a draft*, which is what decides between it and
  plain decoding; before, the rounds without a match (the first 5 to 20 of a response, before the
  text starts repeating itself) counted as one-token rounds of the copier at the cost of a
  drafted round, its rate fell below plain decoding's within the response, and the policy left
  it (for plain decoding or its shorter arm, whose drafted rounds cost less) and came back to it
  only rounds after the copy matched again.
- **Dominated arms drop out.** The index is ``rate_i + max_j rate_j (exploration sqrt(ln n / n_i)
  + 1 / (1 + N_i))``, optimism in units of the best rate, with ``n_i`` and ``N_i`` (the effective
  and all rounds of the arm's tokens) no larger than its timed rounds plus the two of its drafter's
  pooled time: a rate is tokens per round over seconds per round, and side observations carry no
  time, so an arm observed often but played once is not taken for known (a longer copier arm whose
  one round was preempted would otherwise never be played again). An arm resting on a round or two
  (a first response, an unlucky first draw) is tried again soon, an arm much slower than the best
  one over many responses is not pulled again, one within the noise now and then; ``j`` runs over the arms awake in the round. Arms with no
  estimate yet are played first, the longest draft of each drafter first (its round estimates the
  drafter's shorter arms as well).

The simulator runs many servers in lockstep (one per run), each through a chain of responses, so
``begin_response(runs)`` starts a new response for the runs in ``runs`` only; a feedback key
``response_end`` (per run: this round completed the response) does the same from inside the loop.
Every round's arithmetic runs in compiled kernels over the runs
(:mod:`genbandit.policies._serving_numba`), and the decoder's round (learn from it and from its side
observations, choose the next arm) is one call with scalar arguments: right after the target's
forward pass the caches are cold, and there the earlier numpy and scalar-Python versions of the same
formulas took 70 to 200 us a round, 4 to 10% of a 2 ms round of the demo's models.
"""

from __future__ import annotations

from numbers import Real
from typing import Any, Sequence

import numpy as np

from ..core.base import Policy
from ..core.registry import ENVIRONMENTS, register_policy
from ..core.validation import Interval, InvalidInputError, InvalidParameterError, check_finite_array

__all__ = ["WarmThroughputUCB"]

#: The most rounds one response weighs in an arm's carried tokens per round.
_PER_RESPONSE = 4.0
#: The state's columns of an arm's tokens (counted in rounds), as opposed to its round times (counted in own pulls).
_TOKENS = [0, 1, 4, 5]
#: A side observation slot of the decoder's round call left empty (no arm).
_NO_OBSERVATION = (-1, 0.0, -1.0)


@register_policy("warm-throughput-ucb")
class WarmThroughputUCB(Policy):
    """Upper confidence bound on tokens per second, warm-started from earlier responses.

    ``update(arm, {"tokens": y, "seconds": s})``: the round emitted ``y >= 1`` tokens in ``s > 0``
    seconds. A bare number ``y`` counts as ``{"tokens": y, "seconds": 1}`` (a simulator that reports
    no time: the rate is then tokens per round). Per arm ``i`` (length ``k_i``; with ``arm_lengths``
    and ``arm_drafters``, ``p`` its drafter's next shorter arm) the policy keeps carried sums ``C``
    from earlier responses and the current response's sums, discounted by ``discount`` per round,
    ``D``, and undiscounted, ``R``, of: rounds ``n`` (its own and its drafter's longer arms', a round
    of ``y`` tokens counting as ``min(y - 1, k_i) + 1`` for it), their tokens over ``p``'s ``g``
    (all their tokens when there is no ``p``), the rounds ``r`` among them that accepted ``k_p``
    draft tokens (all when no ``p``) and ``h`` that accepted ``k_i``, and its own pulls' log seconds.
    With a carried weight ``w^x = min(prior_rounds, C^x) / (1 + R^x)`` for a count ``x``, the gain
    ``G_i = (w^r C^g / C^r + D^g) / (w^r + D^r)`` and ``H_i`` likewise with ``h``; tokens per round
    ``T_i = G_i`` and ``S_i = H_i`` without ``p``, else ``T_i = T_p + S_p G_i`` and ``S_i = S_p H_i``;
    seconds per round ``exp((C^s_i + R^s_i + 2 g_i) / (M_i + 2))`` with ``M_i`` its own pulls and
    ``g_i = log(t_0 + k_i s_d)``, ``t_0`` the geometric mean time of plain decoding's rounds (length 0) and ``s_d``
    the mean over its drafter ``d``'s timed arms ``j`` (weighted by their pulls) of ``max(t_j - t_0, 0) / k_j``,
    ``t_j`` an arm's geometric mean time (``g_i`` the mean log time of all rounds of its drafter, shrunk by two
    rounds' weight towards every arm's, before both have timed rounds); the rate ``T_i`` over that; and the
    index ``rate_i + max_j rate_j (exploration sqrt(ln(n) / min(n_i, M_i + 2)) + 1 / (1 + min(N_i, M_i + 2)))``
    with ``n_i = w^n + D^n``, ``n = sum_i n_i``, ``N_i = C^n_i + R^n_i``, ``i`` and ``j`` over the arms awake (all through
    ``select``; the decoder's round call ``_play`` leaves out the copiers with no draft). Arms without an estimate yet
    are played first, the longest first. ``begin_response()`` folds the response into the carried
    sums (its rounds with a weight of ``min(R^n_i, 4)`` rounds, its round times as they came) and
    caps each arm's carried counts at ``memory`` (means kept), so older responses fade.
    ``observe(arm, y)`` counts a round of ``y`` tokens of ``arm`` (and its drafter's shorter arms)
    without a time and without the discount. ``reset()`` forgets everything.

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
        Each arm's draft length (0 for plain decoding) and drafter name; with them, the lengths of
        a drafter share one acceptance curve (see above).

    Examples
    --------
    >>> from genbandit.policies.speculative_serving import WarmThroughputUCB
    >>> policy = WarmThroughputUCB(n_arms=2, seed=0)
    >>> # arm 0 emits 4 tokens in 10 ms, arm 1 emits 6 tokens in 30 ms: arm 0 is faster per second
    >>> for arm, y, s in [(0, 4, 0.010), (1, 6, 0.030)] * 3:
    ...     _ = policy.update(arm, {"tokens": y, "seconds": s})
    >>> policy.rates().round(1).tolist()  # 3 rounds each: the round times still lean on their common mean
    [[366.3, 218.4]]
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
        # the carried, current (this response, as observed) and recent (this response, discounted) sums per arm: [..., 0]
        # tokens over what its previous (next shorter) arm would have emitted, [..., 1] rounds observed (own or a longer
        # arm's), [..., 2] log seconds, [..., 3] own pulls, [..., 4] rounds where the previous arm's draft was accepted in
        # full (all rounds for an arm with no previous one), [..., 5] rounds where its own draft was
        self._stats = np.zeros((3, n_runs, self.n_arms, 6))
        # derived per run and arm: the carried gain and full-acceptance share, seconds per round, estimated (1) or not (0)
        self._cache = np.zeros((4, n_runs, self.n_arms))
        # per arm: its length, its previous arm (its drafter's next shorter one, -1: none) and that arm's length (-1: none),
        # the arm at its place in the shortest-first order, then rows of shorter[i, j] (arm j drafts with arm i's drafter,
        # fewer tokens: a prefix of arm i's draft) and of the arms pooled for the time prior (same drafter)
        k = np.zeros(self.n_arms) if self.arm_lengths is None else np.asarray(self.arm_lengths, dtype=float)
        same = np.zeros((self.n_arms, self.n_arms), dtype=bool) if self.arm_drafters is None else \
            np.equal.outer(np.asarray(self.arm_drafters, dtype=object), np.asarray(self.arm_drafters, dtype=object))
        shorter = same & (k[None, :] > 0) & (k[None, :] < k[:, None])
        previous = np.array([max(np.flatnonzero(row), key=lambda j: k[j], default=-1) for row in shorter], dtype=float)
        previous_length = np.where(previous >= 0, k[np.maximum(previous, 0).astype(int)], -1.0)
        order = np.argsort(k, kind="stable")
        self._layout = np.column_stack([k, previous, previous_length, order, shorter, same | np.eye(self.n_arms, dtype=bool)]).astype(float)
        _kernels().refresh(self._stats, self._cache, self._layout)

    # views of the packed state, by name
    _carried = property(lambda self: self._stats[0])
    _current = property(lambda self: self._stats[1])
    _recent = property(lambda self: self._stats[2])
    _seconds_per_round = property(lambda self: self._cache[2])

    def begin_response(self, runs: Any = None) -> None:
        """Start a new response for ``runs`` (indices or a boolean mask; all runs by default)."""
        self._ensure_state(single=False)
        rows = np.arange(self._n_runs) if runs is None else np.arange(self._n_runs)[np.asarray(runs)]
        current = self._current[rows].copy()
        # tokens per round: a response counts as _PER_RESPONSE rounds at most (its mean kept), so the prior is close to
        # a mean over responses, not over the rounds an arm happened to get (a copier pulled all along copy-heavy
        # responses would otherwise dominate), while a single probe counts for one round only
        current[..., _TOKENS] *= np.minimum(current[..., 1:2], _PER_RESPONSE) / np.maximum(current[..., 1:2], 1.0)
        total = self._carried[rows] + current
        for count, columns in ((1, _TOKENS), (3, [2, 3])):  # cap the carried responses / rounds at `memory`, means kept
            scale = np.where(total[..., count] > self.memory, self.memory / np.maximum(total[..., count], 1e-300), 1.0)
            total[..., columns] *= scale[..., None]
        self._carried[rows] = total
        self._current[rows] = 0.0
        self._recent[rows] = 0.0
        _kernels().refresh(self._stats, self._cache, self._layout)

    def rates(self) -> np.ndarray:
        """``(n_runs, n_arms)`` each arm's estimated tokens per second (0 while it has no estimate)."""
        self._ensure_state(single=False)
        out = np.zeros((self._n_runs, self.n_arms))
        _kernels().rates(self._stats, self._cache, self._layout, float(self.prior_rounds), out)
        return out

    def _select(self, contexts, asleep: int = 0):
        """Each run's arm among the awake ones: bit ``i`` of ``asleep`` set (arms 0 to 62) means arm ``i`` has no draft now."""
        out = np.empty(self._n_runs, dtype=np.int64)
        _kernels().select(self._stats, self._cache, self._layout, float(self.prior_rounds), float(self.exploration), asleep, out)
        return out

    def observe(self, arm: int, tokens: float) -> "WarmThroughputUCB":
        """Count a round that ``arm`` was not played in but whose outcome is known: ``tokens`` it would have emitted.

        A side observation (Mannor and Shamir, 2011): a copier's draft costs microseconds and is a
        function of the text, so it can be compared with what the round of another arm emitted
        (exact under greedy decoding; under sampling distributed as the copier's own round). It
        counts as a round of ``arm`` and of its drafter's shorter arms, without a time and without
        advancing the discount. One run only.
        """
        self._ensure_state(single=True)
        arm = int(self._check_actions(np.asarray(arm)[None])[0])
        tokens = float(check_finite_array("tokens", np.asarray([tokens], dtype=float), (1,), type(self).__name__)[0])
        length = self._layout[arm, 0]
        if not 1.0 <= tokens <= length + 1.0:
            raise InvalidInputError(f"An arm of length {length:g} emits 1 to {length + 1:g} tokens. Got {tokens!r} instead.")
        _kernels().observe(self._stats, self._cache, self._layout, arm, tokens, -1.0)
        return self

    def _play(self, arm: int, tokens: float, seconds: float, observed: Sequence[tuple[int, float, float]] = (), asleep: int = 0) -> int:
        """The decoder's round, trusting its inputs: ``update`` with the round, then for each ``(other, y, above)`` in
        ``observed`` a side observation (``other`` would have emitted ``y``), counted for ``other`` and its drafter's
        shorter arms longer than ``above`` (-1: all; a played shorter arm of the drafter has its own round), and the
        next ``select`` among the arms awake (bit ``i`` of ``asleep`` set: arm ``i`` has no draft for the next round):
        one compiled call for up to two observations (one run only): ``arm``, ``asleep`` and each ``other`` ints, ``tokens``,
        ``seconds``, ``y`` and ``above`` floats, as the compiled call takes them unchecked. Returns the next arm."""
        self._t += 1
        kernels = _kernels()
        n = len(observed)
        first = observed[0] if n else _NO_OBSERVATION
        second = observed[1] if n > 1 else _NO_OBSERVATION
        chosen = kernels.play_round(self._stats, self._cache, self._layout, float(self.prior_rounds), float(self.exploration),
                                    float(self.discount), arm, tokens, seconds, *first, *second, asleep)
        if n <= 2:
            return chosen
        for other, other_tokens, above in observed[2:]:
            kernels.observe(self._stats, self._cache, self._layout, other, other_tokens, above)
        return int(self._select(None, asleep)[0])

    def _update(self, actions, feedback, contexts):
        _kernels().learn(self._stats, self._cache, self._layout, float(self.discount), actions, feedback["tokens"], feedback["seconds"])
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


def _kernels():
    """The compiled kernels (numba is imported on first use, and every kernel compiled then, not in a timed round)."""
    global _KERNELS
    if _KERNELS is None:
        from . import _serving_numba as kernels

        kernels.warm()
        _KERNELS = kernels
    return _KERNELS


_KERNELS = None
