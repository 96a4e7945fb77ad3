"""The serving policy of speculative decoding: tokens per second, state carried across responses, default of the decoder."""

from __future__ import annotations

import numpy as np
import pytest

from genbandit.core.validation import InvalidInputError, InvalidParameterError
from genbandit.policies.speculative import UCBSpec
from genbandit.policies.speculative_serving import WarmThroughputUCB


def play(policy, rounds, law, rng):
    """``rounds`` rounds where ``law(arm, rng) -> (tokens, seconds)``; returns the arms played."""
    arms = []
    for _ in range(rounds):
        arm = policy.select()
        tokens, seconds = law(arm, rng)
        policy.update(arm, {"tokens": tokens, "seconds": seconds})
        arms.append(arm)
    return arms


# arm 0: 2 tokens per round in 1 ms (a cheap copier), arm 1: 5 tokens per round in 4 ms (a costly model drafter),
# arm 2: 1 token in 1.5 ms (plain decoding). Per second: 2000, 1250, 667 -- per round arm 1 is the best.
def cheap_copier_wins(arm, rng):
    tokens = [2, 5, 1][arm]
    return tokens, [1.0e-3, 4.0e-3, 1.5e-3][arm] * rng.uniform(0.9, 1.1)


def test_optimises_tokens_per_second_where_ucbspec_optimises_tokens_per_round():
    rng = np.random.default_rng(0)
    policy = WarmThroughputUCB(n_arms=3, seed=0)
    arms = play(policy, 200, cheap_copier_wins, rng)
    assert np.mean(np.array(arms[-100:]) == 0) > 0.85
    ucb = UCBSpec(n_arms=3, max_length=6, seed=0)
    for _ in range(200):
        arm = ucb.select()
        ucb.update(arm, cheap_copier_wins(arm, rng)[0])
    assert ucb.select() == 1  # the paper's reward prefers the arm with more tokens per round


def test_next_response_starts_from_what_was_learned_without_round_robin():
    rng = np.random.default_rng(1)
    policy = WarmThroughputUCB(n_arms=3, seed=0)
    first = play(policy, 60, cheap_copier_wins, rng)
    assert first[:3] == [0, 1, 2]  # the first response tries every arm once
    policy.begin_response()
    second = play(policy, 20, cheap_copier_wins, rng)
    assert second.count(0) >= 18


def test_adapts_within_a_response_when_the_prompt_differs():
    """Carried: arm 0 is fastest. New response: arm 0 now emits 1 token per round; the policy leaves it within a few rounds."""
    rng = np.random.default_rng(2)
    policy = WarmThroughputUCB(n_arms=3, seed=0)
    for _ in range(5):
        play(policy, 60, cheap_copier_wins, rng)
        policy.begin_response()

    def copier_misses(arm, rng):
        tokens, seconds = cheap_copier_wins(arm, rng)
        return (1, seconds) if arm == 0 else (tokens, seconds)

    arms = play(policy, 50, copier_misses, rng)
    switch = next(i for i, a in enumerate(arms) if a != 0)
    assert switch <= 10 and np.mean(np.array(arms[switch:]) == 1) > 0.75


def test_dominated_arm_is_no_longer_pulled_after_a_few_responses():
    rng = np.random.default_rng(3)
    policy = WarmThroughputUCB(n_arms=3, seed=0)
    late = []
    for response in range(10):
        arms = play(policy, 50, cheap_copier_wins, rng)
        policy.begin_response()
        if response >= 5:
            late += arms
    assert late.count(2) == 0  # plain decoding, 3 times slower than the copier here, is dropped


def test_begin_response_only_touches_the_given_runs():
    policy = WarmThroughputUCB(n_arms=2, seed=0).reset(n_runs=2)
    for _ in range(40):
        policy.update_batch(np.array([0, 0]), {"tokens": np.array([3.0, 3.0]), "seconds": np.array([1.0, 1.0])})  # 1 s per round: log seconds 0
    policy.begin_response(runs=np.array([True, False]))
    assert policy._current[1, 0, :4].tolist() == [120.0, 40.0, 0.0, 40.0] and not policy._current[0].any()  # run 1 untouched
    # tokens per round: the response weighs 4 rounds at most, its mean (3) kept; round times: 40 rounds capped at memory = 30
    assert policy._carried[0, 0, :4].tolist() == pytest.approx([12.0, 4.0, 0.0, 30.0])
    assert np.allclose(policy.rates()[0], [3.0, 0.0])


def test_bare_numbers_count_as_rounds_of_unit_time_and_bad_feedback_raises():
    policy = WarmThroughputUCB(n_arms=2, seed=0)
    policy.update(1, 4.0)
    assert policy.rates().tolist() == [[0.0, 4.0]]
    for bad in ({"tokens": 1.0}, {"tokens": 1.0, "seconds": 0.0}, {"tokens": -1.0, "seconds": 1.0}):
        with pytest.raises(InvalidInputError):
            policy.update(0, bad)


def test_state_dict_continues_exactly():
    rng = np.random.default_rng(4)
    policy = WarmThroughputUCB(n_arms=3, seed=0)
    play(policy, 30, cheap_copier_wins, rng)
    policy.begin_response()
    twin = WarmThroughputUCB.from_state_dict(policy.state_dict())
    law = np.random.default_rng(5), np.random.default_rng(5)
    assert play(policy, 30, cheap_copier_wins, law[0]) == play(twin, 30, cheap_copier_wins, law[1])


def test_a_round_tells_what_the_drafters_shorter_arms_would_have_emitted():
    # arms: plain, copier:2, copier:6, model:3
    policy = WarmThroughputUCB(n_arms=4, arm_lengths=[0, 2, 6, 3], arm_drafters=["", "copier", "copier", "model"], discount=1.0, seed=0)
    policy.update(2, {"tokens": 5.0, "seconds": 0.002})  # copier:6 accepted 4 tokens: copier:2 would have emitted 3
    policy.update(2, {"tokens": 2.0, "seconds": 0.002})  # accepted 1: copier:2 would have emitted 2
    # column 0: each arm's tokens over its next shorter arm's (copier:6 emitted 2 more, then 0 more, than copier:2 would have)
    assert policy._current[0, :, 0].tolist() == [0.0, 5.0, 2.0, 0.0] and policy._current[0, :, 1].tolist() == [0.0, 2.0, 2.0, 0.0]
    assert policy._current[0, :, 3].tolist() == [0.0, 0.0, 2.0, 0.0]  # only the played arm has a time
    policy.update(1, {"tokens": 3.0, "seconds": 0.001})  # a shorter arm's round adds no round of the longer one ...
    assert policy._current[0, 2, 1] == 2.0
    # ... but moves its estimate: copier:2 emits 8 / 3 tokens per round and accepts its 2 draft tokens in 2 of 3 rounds;
    # copier:6, in the one round of its own that got that far, 2 more: 8 / 3 + 2 / 3 * 2 tokens per round
    tokens = policy.rates()[0] * policy._seconds_per_round[0]
    assert tokens[1] == pytest.approx(8.0 / 3.0) and tokens[2] == pytest.approx(8.0 / 3.0 + 2.0 / 3.0 * 2.0)
    with pytest.raises(InvalidParameterError):
        WarmThroughputUCB(n_arms=4, arm_lengths=[0, 2, 6], arm_drafters=["", "c", "c"])


def test_a_longer_arm_unlucky_at_first_is_not_locked_out_by_its_shorter_arm():
    """copier:6 accepts up to 5 more tokens per round than copier:3 at the same cost, but its first rounds (the start of a
    response, nothing to copy yet) are rejected; the shorter arm's full acceptances keep it below copier:6 in tokens."""
    policy = WarmThroughputUCB(n_arms=3, arm_lengths=[0, 3, 6], arm_drafters=["", "copier", "copier"], seed=0)
    rng = np.random.default_rng(7)
    for arm in (0, 1, 2, 2, 2):  # every arm once, then copier:6 three times with nothing accepted
        policy.update(arm, {"tokens": 1.0, "seconds": [1.0e-3, 1.1e-3, 1.2e-3][arm]})
    played = []
    for response in range(4):
        for _ in range(60):  # from now on the text repeats: a copier's draft is accepted in full 90% of the rounds
            arm = policy.select()
            accepted = [0, 3, 6][arm] if rng.random() < 0.9 else int(rng.integers(0, [0, 3, 6][arm] + 1))
            policy.update(arm, {"tokens": accepted + 1.0, "seconds": [1.0e-3, 1.1e-3, 1.2e-3][arm] * rng.uniform(0.9, 1.1)})
            played.append(arm)
        policy.begin_response()
    assert played[-60:].count(2) >= 55  # the last response plays copier:6
    tokens = policy.rates()[0] * policy._seconds_per_round[0]
    assert tokens[2] >= tokens[1] >= tokens[0] == 1.0



def test_a_side_observation_counts_a_round_without_time_or_discount():
    policy = WarmThroughputUCB(n_arms=3, arm_lengths=[0, 3, 6], arm_drafters=["", "copier", "copier"], seed=0)
    policy.update(0, {"tokens": 1.0, "seconds": 0.001})
    policy.observe(2, 5.0)  # copier:6 would have accepted 4 tokens: copier:3, 3 of its 3
    assert policy._current[0, :, 1].tolist() == [1.0, 1.0, 1.0] and policy._current[0, :, 3].tolist() == [1.0, 0.0, 0.0]
    assert policy._recent[0, 0, 1] == 1.0  # the discount advances with played rounds only
    assert policy._current[0, 1, 5] == 1.0 and policy._current[0, 2, 4] == 1.0  # copier:3 accepted in full: copier:6 reached 3
    with pytest.raises(InvalidInputError):
        policy.observe(1, 5.0)  # an arm of length 3 emits at most 4 tokens

def test_response_end_in_the_feedback_starts_the_next_response_of_that_run():
    policy = WarmThroughputUCB(n_arms=2, seed=0).reset(n_runs=2)
    for end in ([0, 0], [1, 0]):
        policy.update_batch(np.array([1, 1]), {"tokens": np.array([3.0, 3.0]), "seconds": np.array([1.0, 1.0]), "response_end": np.array(end)})
    assert not policy._current[0].any() and policy._carried[0, 1, :4].tolist() == [6.0, 2.0, 0.0, 2.0]  # run 0 folded its response in
    assert policy._current[1, 1, 1] == 2.0 and not policy._carried[1].any()  # run 1 is still in its first response


def test_one_run_path_decides_as_the_batch_path():
    """The decoder's single-run path (scalar Python) plays and learns as the batch path the simulator uses."""
    lengths, drafters = [0, 3, 6, 3, 6, 3, 6], ["", "model", "model", "pld", "pld", "suffix", "suffix"]
    one = WarmThroughputUCB(n_arms=7, arm_lengths=lengths, arm_drafters=drafters, seed=0)
    batch = WarmThroughputUCB(n_arms=7, arm_lengths=lengths, arm_drafters=drafters, seed=0).reset(n_runs=2)
    rng = np.random.default_rng(6)
    accept = np.array([0.0, 0.7, 0.7, 0.3, 0.3, 0.8, 0.8])
    cost = np.array([1.0, 3.0, 5.0, 1.1, 1.1, 1.1, 1.2]) * 1e-3
    arms = []
    for response in range(6):
        accept = np.clip(accept + rng.normal(0.0, 0.2, 7), 0.0, 0.95)  # each prompt its own acceptance
        for _ in range(40):
            arm = one.select()
            assert batch.select_batch().tolist() == [arm, arm]
            tokens = 1.0 + min(rng.geometric(1.0 - accept[arm]) - 1, lengths[arm])
            seconds = cost[arm] * rng.uniform(0.8, 1.5)
            one.update(arm, {"tokens": tokens, "seconds": seconds})
            batch.update_batch(np.array([arm, arm]), {"tokens": np.full(2, tokens), "seconds": np.full(2, seconds)})
            arms.append(arm)
        one.begin_response()
        batch.begin_response()
    assert len(set(arms)) >= 4  # the stream exercised several arms, their counterfactuals and round times
    assert np.allclose(one.rates()[0], batch.rates()[1], rtol=1e-12)
    for name in ("_carried", "_current", "_recent"):
        assert np.allclose(getattr(one, name)[0], getattr(batch, name)[0], rtol=1e-12)


def test_the_decoders_round_without_play_takes_the_policys_public_steps_to_the_same_state():
    """A timed policy without the one-call ``_play`` is served by the decoder through learn, observe and select; for the
    serving policy that path and ``_play`` choose the same arms and end in the same state."""
    pytest.importorskip("torch")
    from genbandit.specdec.decoder import _round_by_public_calls

    lengths, drafters = [0, 3, 6, 3, 6], ["", "pld", "pld", "suffix", "suffix"]
    fused = WarmThroughputUCB(n_arms=5, arm_lengths=lengths, arm_drafters=drafters, seed=0)
    stepped = WarmThroughputUCB(n_arms=5, arm_lengths=lengths, arm_drafters=drafters, seed=0)
    steps, first = _round_by_public_calls(stepped)
    rng = np.random.default_rng(8)
    arm = fused.select()
    assert stepped.select() == first(0) == arm
    for round_ in range(120):
        tokens, seconds, seen = float(rng.integers(1, lengths[arm] + 2)), 1e-3 * rng.uniform(0.9, 1.5), float(rng.integers(1, 8))
        chosen = fused._play(arm, tokens, seconds, [(4, seen, -1.0)])
        assert steps(arm, tokens, seconds, [(4, seen, -1.0)], 0) == chosen
        arm = chosen
        if round_ % 40 == 39:
            fused.begin_response()
            stepped.begin_response()
            arm = fused.select()
    assert np.array_equal(stepped._stats, fused._stats) and np.array_equal(stepped._cache, fused._cache)


def test_the_decoders_round_call_is_update_observe_and_select():
    """``_play`` (the decoder's one call per round) learns and chooses as update, observe and select do, and an observation
    of the played drafter's longer arm counts only above the played length (the played round has the shorter ones)."""
    lengths, drafters = [0, 3, 6, 3, 6], ["", "pld", "pld", "suffix", "suffix"]
    calls = WarmThroughputUCB(n_arms=5, arm_lengths=lengths, arm_drafters=drafters, seed=0)
    fused = WarmThroughputUCB(n_arms=5, arm_lengths=lengths, arm_drafters=drafters, seed=0)
    rng = np.random.default_rng(8)
    arm = fused.select()
    for round_ in range(120):
        assert calls.select() == arm
        tokens, seconds, seen = float(rng.integers(1, lengths[arm] + 2)), 1e-3 * rng.uniform(0.9, 1.5), float(rng.integers(1, 8))
        calls.update(arm, {"tokens": tokens, "seconds": seconds})
        calls.observe(4, seen)
        arm = fused._play(arm, tokens, seconds, [(4, seen, -1.0)])
        if round_ % 40 == 39:
            calls.begin_response()
            fused.begin_response()
            arm = fused.select()
    assert np.array_equal(calls._stats, fused._stats) and np.array_equal(calls._cache, fused._cache)
    before = fused._current[0].copy()
    fused._play(3, 4.0, 1e-3, [(4, 6.0, 3.0)])  # suffix:3 accepted its 3 draft tokens; its 6-token draft would have accepted 5
    added = fused._current[0] - before
    assert added[3, 1] == 1.0 and added[4, 1] == 1.0  # one round each: suffix:3 its own, suffix:6 the observation
    assert added[4, 0] == 2.0 and added[4, 4] == 1.0 and added[4, 5] == 0.0  # 2 tokens beyond suffix:3's, reached 3, not 6


def test_a_copier_with_no_draft_is_asleep_and_the_best_awake_arm_plays():
    """Sleeping bandits: ``_play``'s ``asleep`` bits take the copiers without a draft out of the choice (their round would be
    a plain one), the best arm among the others plays, and with every arm asleep the choice is unchanged."""
    lengths, drafters = [0, 3, 6, 3, 6], ["", "pld", "pld", "suffix", "suffix"]
    policy = WarmThroughputUCB(n_arms=5, arm_lengths=lengths, arm_drafters=drafters, seed=0)
    for arm, tokens, seconds in [(0, 1, 1.0e-3), (2, 1, 2.0e-3), (4, 7, 1.3e-3)] * 8:  # suffix:6 best, plain next, pld last
        policy.update(arm, {"tokens": tokens, "seconds": seconds})
    suffix, pld = 0b11000, 0b00110
    assert policy.select() == 4
    assert policy._play(4, 7.0, 1.3e-3, (), suffix) == 0  # suffix asleep: plain (pld is slower per second)
    assert policy._play(0, 1.0, 1.0e-3, (), suffix | pld) == 0
    assert policy._play(0, 1.0, 1.0e-3, (), 0) == 4  # awake again: back to the copier at once
    no_plain = WarmThroughputUCB(n_arms=4, arm_lengths=lengths[1:], arm_drafters=drafters[1:], seed=0)
    no_plain.update(3, {"tokens": 7, "seconds": 1.3e-3})
    assert no_plain._play(3, 7.0, 1.3e-3, (), 0b1111) == no_plain._play(3, 7.0, 1.3e-3, (), 0) == no_plain.select()


def test_a_drafters_untimed_length_is_priced_between_plain_decoding_and_its_timed_length():
    """A round of length k verifies k + 1 positions and drafts k tokens: with plain decoding at 1 ms a round and a draft
    model's one round of length 6 at 7 ms (1 ms a drafted token), its length 3 is estimated at 4 ms before it is played,
    and a copier whose length 6 takes 1.6 ms prices its length 3 at 1.3 ms. Pooling the draft model's round with every
    arm's (the copier's cheap ones) would price its length 3 near a copier's round. Without plain decoding among the
    arms, nothing anchors the line, and the drafter's rounds are pooled as before."""
    lengths, drafters = [0, 3, 6, 3, 6], ["plain", "model", "model", "copier", "copier"]
    policy = WarmThroughputUCB(n_arms=5, arm_lengths=lengths, arm_drafters=drafters, seed=0)
    for _ in range(10):
        policy.update(0, {"tokens": 1, "seconds": 1e-3})
        policy.update(4, {"tokens": 3, "seconds": 1.6e-3})
    policy.update(2, {"tokens": 2, "seconds": 7e-3})
    seconds = policy._seconds_per_round[0]
    assert seconds[1] == pytest.approx(4e-3, rel=0.02) and seconds[2] == pytest.approx(7e-3, rel=0.02)
    assert seconds[3] == pytest.approx(1.3e-3, rel=0.02)
    # the same rounds without plain decoding: the draft model's length 3 borrows its pooled time, shrunk towards every arm's
    unanchored = WarmThroughputUCB(n_arms=4, arm_lengths=lengths[1:], arm_drafters=drafters[1:], seed=0)
    for _ in range(10):
        unanchored.update(3, {"tokens": 3, "seconds": 1.6e-3})
    unanchored.update(1, {"tokens": 2, "seconds": 7e-3})
    every = np.exp((10 * np.log(1.6e-3) + np.log(7e-3)) / 11)
    assert unanchored._seconds_per_round[0, 0] == pytest.approx(np.exp((np.log(7e-3) + 2 * np.log(every)) / 3), rel=1e-6)
