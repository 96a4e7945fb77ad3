"""Compiled per-round kernels of :class:`genbandit.policies.speculative_serving.WarmThroughputUCB` (numba; imported lazily).

Each works in place on the policy's three packed arrays, which keeps a call to a few arguments
(a compiled call pays for each argument it unboxes; right after a target's forward pass, with the
caches cold, that was about 0.6 us an argument here):

- ``stats`` ``(3, n_runs, n_arms, 6)``: the carried, current and discounted sums per arm, columns
  0 tokens over what the arm's next shorter arm would have emitted, 1 rounds, 2 log seconds,
  3 own pulls, 4 rounds where the shorter arm's draft was accepted in full, 5 rounds where the
  arm's own was;
- ``cache`` ``(4, n_runs, n_arms)``: the carried gain and full-acceptance share (fixed within a
  response), the seconds per round and whether the arm is estimated (1.0) or not (0.0);
- ``layout`` ``(n_arms, 4 + 2 n_arms)``: per arm its length, its previous (next shorter) arm and
  that arm's length (-1: none), the arm at its place in the shortest-first order, then its row
  of ``shorter`` (arm ``j`` drafts a prefix of its draft) and of ``group`` (arms pooled for the
  time prior).

:func:`select` and :func:`rates` (the choice and the rates it rests on), :func:`learn` (one round
per run), :func:`observe` (a side observation), :func:`play` (the decoder's round: learn, the
side observations, the next choice, in one call; :data:`play_round` is its compiled version, called
without the dispatcher) and :func:`refresh` (after a new response). The formulas are the class docstring's.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, typeof

#: Pseudo-rounds of the drafter's pooled round time in an arm's time estimate.
SHRINK = 2.0
#: A round time counts as at most e^CLIP = 2 times the arm's estimate (a preempted round on a busy machine).
CLIP = math.log(2.0)
#: ``layout`` columns.
LENGTH, PREVIOUS, PREVIOUS_LENGTH, ORDER, SHORTER = 0, 1, 2, 3, 4


@njit(cache=True, nogil=True)
def _estimate_run(stats, cache, layout, prior_rounds, r, tokens, survive, rates, pulls):  # pragma: no cover - compiled
    """Into ``rates`` and ``pulls`` run ``r``'s tokens per second and effective rounds per arm (0 while not estimated);
    tokens per round by the product-limit rule, shortest arm first: ``T_i = T_p + S_p G_i``, ``S_i = S_p H_i``."""
    carried, current, recent = stats[0, r], stats[1, r], stats[2, r]
    for place in range(layout.shape[0]):
        i = int(layout[place, ORDER])
        prior = min(prior_rounds, carried[i, 4]) / (1.0 + current[i, 4])
        reached = prior + recent[i, 4]
        gain = (prior * cache[0, r, i] + recent[i, 0]) / reached if reached > 0.0 else 0.0
        hold = (prior * cache[1, r, i] + recent[i, 5]) / reached if reached > 0.0 else 0.0
        p = int(layout[i, PREVIOUS])
        if p < 0:
            tokens[i], survive[i] = gain, hold
        else:
            tokens[i], survive[i] = tokens[p] + survive[p] * gain, survive[p] * hold
        if cache[3, r, i] > 0.0:
            rates[i] = tokens[i] / cache[2, r, i]
            pulls[i] = min(prior_rounds, carried[i, 1]) / (1.0 + current[i, 1]) + recent[i, 1]
        else:
            rates[i], pulls[i] = 0.0, 0.0


@njit(cache=True, nogil=True)
def _asleep(asleep, i):  # pragma: no cover - compiled
    """Whether arm ``i`` is asleep: bit ``i`` of ``asleep`` set (arms 0 to 62 have a bit; later arms are always awake)."""
    return i < 63 and (asleep >> i) & 1 == 1


@njit(cache=True, nogil=True)
def _choose_run(stats, cache, layout, prior_rounds, exploration, r, asleep):  # pragma: no cover - compiled
    """Run ``r``'s arm among the awake ones (bit ``i`` of ``asleep`` set: arm ``i`` cannot draft this round): the largest
    ``rate_i + max_j rate_j (exploration sqrt(ln n / n_i) + 1 / (1 + N_i))``, ``j`` over the awake arms (the first on
    ties), or while an awake arm has no estimate, the longest such arm (the first on ties)."""
    n_arms = layout.shape[0]
    tokens, survive, rates, pulls = np.empty(n_arms), np.empty(n_arms), np.empty(n_arms), np.empty(n_arms)
    _estimate_run(stats, cache, layout, prior_rounds, r, tokens, survive, rates, pulls)
    if asleep != 0:  # every arm asleep (only copiers, none with a draft): each round is a plain one, any arm will do
        awake = False
        for i in range(n_arms):
            awake = awake or not _asleep(asleep, i)
        asleep = asleep if awake else 0
    best, longest, best_rate = -1, -1.0, 0.0
    for i in range(n_arms):
        if _asleep(asleep, i):
            continue
        best_rate = max(best_rate, rates[i])
        if pulls[i] <= 0.0 and layout[i, LENGTH] > longest:
            best, longest = i, layout[i, LENGTH]
    if best >= 0:
        return best
    log_total = math.log(max(pulls.sum(), 2.0))
    best_index = -np.inf
    for i in range(n_arms):
        if _asleep(asleep, i):
            continue
        # a rate is tokens per round over seconds per round: its evidence is the lesser of the rounds of its tokens (side
        # observations and a longer arm's rounds included) and of its timed rounds (its own, plus its drafter's pooled time)
        timed_rounds = stats[0, r, i, 3] + stats[1, r, i, 3] + SHRINK
        seen = min(stats[0, r, i, 1] + stats[1, r, i, 1], timed_rounds)  # every round, carried included
        index = rates[i] + best_rate * (exploration * math.sqrt(log_total / min(pulls[i], timed_rounds)) + 1.0 / (1.0 + seen))
        if index > best_index:
            best, best_index = i, index
    return best


@njit(cache=True, nogil=True)
def select(stats, cache, layout, prior_rounds, exploration, asleep, out):  # pragma: no cover - compiled
    """Into ``out[r]`` each run's arm (:func:`_choose_run`) among the arms awake (``asleep``: a bit per arm, 0: all awake)."""
    for r in range(out.shape[0]):
        out[r] = _choose_run(stats, cache, layout, prior_rounds, exploration, r, asleep)


@njit(cache=True, nogil=True)
def rates(stats, cache, layout, prior_rounds, out):  # pragma: no cover - compiled
    """Into ``out`` ``(n_runs, n_arms)`` each run's estimated tokens per second per arm (0 while not estimated)."""
    n_arms = layout.shape[0]
    tokens, survive, pulls = np.empty(n_arms), np.empty(n_arms), np.empty(n_arms)
    for r in range(out.shape[0]):
        _estimate_run(stats, cache, layout, prior_rounds, r, tokens, survive, out[r], pulls)


@njit(cache=True, nogil=True)
def _count(stats, layout, r, arm, tokens, above):  # pragma: no cover - compiled
    """Add a round of ``tokens`` of ``arm`` (run ``r``) to the token counts of the arm and of its drafter's shorter arms
    longer than ``above`` (those up to ``above`` have the round already: a played shorter arm of the drafter)."""
    accepted = tokens - 1.0
    for j in range(layout.shape[0]):
        if (j != arm and layout[arm, SHORTER + j] == 0.0) or layout[j, LENGTH] <= above:
            continue
        length, below = layout[j, LENGTH], layout[j, PREVIOUS_LENGTH]
        emitted = tokens if j == arm else min(accepted, length) + 1.0  # what the shorter arm would have emitted
        increment = emitted - (min(accepted, below) + 1.0 if below >= 0.0 else 0.0)
        reached = 1.0 if below < 0.0 or accepted >= below else 0.0
        full = 1.0 if accepted >= length else 0.0
        for s in (1, 2):  # current, recent
            stats[s, r, j, 0] += increment
            stats[s, r, j, 1] += 1.0
            stats[s, r, j, 4] += reached
            stats[s, r, j, 5] += full


@njit(cache=True, nogil=True)
def _refresh_run(stats, cache, layout, r):  # pragma: no cover - compiled
    """Run ``r``'s seconds per round (geometric mean of an arm's round times, shrunk towards its drafter's time while it
    has few) and its estimated arms (tokens seen, and a time in the drafter's pool).

    The drafter's time for an arm of length ``k > 0``, once plain decoding (the arms of length 0) and some arm of the
    drafter of length ``k_i > 0`` have timed rounds: ``t_0 + k s``, with ``t_0`` plain decoding's round time and ``s`` the
    drafter's time per drafted token, ``(t_i - t_0) / k_i`` (at least 0) averaged over its timed arms by their rounds. A
    round verifies ``k + 1`` positions in one target pass and drafts ``k`` tokens, so its time grows with ``k`` from plain
    decoding's: a draft model's round of 3 tokens is then priced between plain decoding and its round of 6, not at every
    arm's pooled time (what the rule below gives it, pulled towards the copiers' cheap rounds). Otherwise the drafter's
    pooled time (all its arms' rounds) shrunk towards every arm's."""
    n_arms = layout.shape[0]
    # each arm's log seconds and own pulls, carried and current, and its geometric mean round time (0 while it has none)
    arm_log, arm_pulls, round_time = np.empty(n_arms), np.empty(n_arms), np.empty(n_arms)
    log_total, pulls_total, plain_log, plain_pulls = 0.0, 0.0, 0.0, 0.0
    for j in range(n_arms):
        arm_log[j], arm_pulls[j] = stats[0, r, j, 2] + stats[1, r, j, 2], stats[0, r, j, 3] + stats[1, r, j, 3]
        round_time[j] = math.exp(arm_log[j] / arm_pulls[j]) if arm_pulls[j] > 0.0 else 0.0
        log_total += arm_log[j]
        pulls_total += arm_pulls[j]
        if layout[j, LENGTH] == 0.0:
            plain_log += arm_log[j]
            plain_pulls += arm_pulls[j]
    every = log_total / max(pulls_total, 1e-300)
    plain = math.exp(plain_log / plain_pulls) if plain_pulls > 0.0 else 0.0
    group = SHORTER + n_arms
    for j in range(n_arms):
        pooled_log, pooled_pulls, per_token, timed = 0.0, 0.0, 0.0, 0.0
        for i in range(n_arms):
            if layout[j, group + i] != 0.0:
                pooled_log += arm_log[i]
                pooled_pulls += arm_pulls[i]
                if arm_pulls[i] > 0.0 and layout[i, LENGTH] > 0.0:
                    per_token += arm_pulls[i] * max(round_time[i] - plain, 0.0) / layout[i, LENGTH]
                    timed += arm_pulls[i]
        if plain_pulls > 0.0 and timed > 0.0 and layout[j, LENGTH] > 0.0:
            drafter = math.log(plain + layout[j, LENGTH] * per_token / timed)
        else:
            drafter = (pooled_log + SHRINK * every) / (pooled_pulls + SHRINK)
        cache[2, r, j] = math.exp((arm_log[j] + SHRINK * drafter) / (arm_pulls[j] + SHRINK))
        cache[3, r, j] = 1.0 if pooled_pulls > 0.0 and stats[0, r, j, 1] + stats[1, r, j, 1] > 0.0 else 0.0


@njit(cache=True, nogil=True)
def refresh(stats, cache, layout):  # pragma: no cover - compiled
    """Every run's carried gains and full-acceptance shares, round times and estimated arms."""
    for r in range(cache.shape[1]):
        for i in range(layout.shape[0]):
            reached = stats[0, r, i, 4]
            cache[0, r, i] = stats[0, r, i, 0] / reached if reached > 0.0 else 0.0
            cache[1, r, i] = stats[0, r, i, 5] / reached if reached > 0.0 else 0.0
        _refresh_run(stats, cache, layout, r)


@njit(cache=True, nogil=True)
def _learn_run(stats, cache, layout, discount, r, arm, tokens, seconds):  # pragma: no cover - compiled
    """One played round of run ``r``: the discount, the round's tokens (:func:`_count`), its log time (clipped at ``CLIP``
    above the arm's estimate once its drafter has a time); the run's round times are refreshed by the caller."""
    stats[2, r] *= discount
    _count(stats, layout, r, arm, tokens, -1.0)
    log_seconds = math.log(seconds)
    group = SHORTER + layout.shape[0]
    for i in range(layout.shape[0]):
        if layout[arm, group + i] != 0.0 and stats[0, r, i, 3] + stats[1, r, i, 3] > 0.0:  # a time to compare with: clip
            log_seconds = min(log_seconds, math.log(cache[2, r, arm]) + CLIP)
            break
    for s in (1, 2):
        stats[s, r, arm, 2] += log_seconds
        stats[s, r, arm, 3] += 1.0


@njit(cache=True, nogil=True)
def learn(stats, cache, layout, discount, arms, tokens, seconds):  # pragma: no cover - compiled
    """One round of every run, in place."""
    for r in range(arms.shape[0]):
        _learn_run(stats, cache, layout, discount, r, arms[r], tokens[r], seconds[r])
        _refresh_run(stats, cache, layout, r)


@njit(cache=True, nogil=True)
def observe(stats, cache, layout, arm, tokens, above):  # pragma: no cover - compiled
    """A side observation of run 0: ``arm`` would have emitted ``tokens`` (counted for its drafter's arms longer than
    ``above``); without a time and without the discount."""
    _count(stats, layout, 0, arm, tokens, above)
    _refresh_run(stats, cache, layout, 0)


@njit(cache=True, nogil=True)
def play(stats, cache, layout, prior_rounds, exploration, discount, arm, tokens, seconds, side_arm, side_tokens, side_above,
         other_arm, other_tokens, other_above, asleep):  # pragma: no cover - compiled
    """The decoder's round of run 0 in one call: ``arm`` emitted ``tokens`` in ``seconds``, then up to two side observations
    (``side_arm`` would have emitted ``side_tokens``, counted for its drafter's arms longer than ``side_above``; the same
    for ``other_*``; an arm of -1: none); returns the next arm among those awake (bit ``i`` of ``asleep`` set: arm ``i``
    has no draft in the next round). Scalars only: an array built for the call cost as much as the call, cold after the
    target's forward pass."""
    _learn_run(stats, cache, layout, discount, 0, arm, tokens, seconds)
    if side_arm >= 0:
        _count(stats, layout, 0, side_arm, side_tokens, side_above)
    if other_arm >= 0:
        _count(stats, layout, 0, other_arm, other_tokens, other_above)
    _refresh_run(stats, cache, layout, 0)
    return _choose_run(stats, cache, layout, prior_rounds, exploration, 0, asleep)


#: :func:`play` compiled for the argument types the policy passes, called without numba's dispatcher (set by :func:`warm`).
play_round = None


def warm() -> None:
    """Compile every kernel now (or load it from numba's cache), with the argument types the policy passes, so that no
    compilation lands in a timed round (the first one on a fresh install takes seconds), and set :data:`play_round`.

    The decoder calls :func:`play` once a round, right after the target's forward pass, when numba's dispatcher (which
    reads every argument's type to find the compiled version) runs with cold caches: measured 9.0 us a call through it
    against 6.3 us calling the compiled version directly. ``play_round`` is that version (``overloads[...].entry_point``)
    for exactly these types: float64 arrays in C order of 4, 3 and 2 dimensions (the policy's own state, which
    :meth:`~genbandit.core.base.Policy.from_state_dict` restores with its dtype and shape checked) and Python
    scalars (ints where an ``int64`` is, floats where a ``float64`` is); it checks no types itself.
    """
    global play_round
    stats, cache, out = np.zeros((3, 1, 2, 6)), np.zeros((4, 1, 2)), np.zeros(1, dtype=np.int64)
    layout = np.array([[0.0, -1.0, -1.0, 0.0, 0.0, 0.0, 1.0, 0.0], [1.0, -1.0, -1.0, 1.0, 0.0, 0.0, 0.0, 1.0]])
    refresh(stats, cache, layout)
    learn(stats, cache, layout, 0.97, np.zeros(1, dtype=np.int64), np.ones(1), np.ones(1))
    observe(stats, cache, layout, 1, 1.0, -1.0)
    round_args = (stats, cache, layout, 8.0, 0.1, 0.97, 1, 1.0, 1.0, -1, 0.0, -1.0, -1, 0.0, -1.0, 0)
    play(*round_args)
    play_round = play.overloads[tuple(typeof(value) for value in round_args)].entry_point
    select(stats, cache, layout, 8.0, 0.1, 0, out)
    rates(stats, cache, layout, 8.0, np.zeros((1, 2)))
