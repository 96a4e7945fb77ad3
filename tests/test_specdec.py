"""The real speculative decoder: losslessness (greedy and sampling), drafters, the BanditSpec loop, the CLI."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import itertools
import random

import numpy as np
import torch
from scipy import stats
from transformers import GPT2Config, GPT2LMHeadModel

from genbandit.core.base import Policy
from genbandit.specdec import Draft, ModelDrafter, PromptLookupDrafter, SpeculativeDecoder, SuffixMatchDrafter
from genbandit.specdec.decoder import make_policy, policy_reward


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_gpt(vocab: int, layers: int, width: int, seed: int, init: float = 0.02, positions: int = 128) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab, n_positions=positions, n_embd=width, n_layer=layers, n_head=2, initializer_range=init,
        bos_token_id=0, eos_token_id=vocab - 1,
    )
    return GPT2LMHeadModel(config).eval().double()


def plain_greedy(model: GPT2LMHeadModel, prompt: list[int], n: int, eos: int | None = None) -> list[int]:
    """The target's own greedy decoding: argmax of a full forward pass (no cache) at every step."""
    ids = list(prompt)
    out: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            tok = int(model(torch.tensor([ids])).logits[0, -1].argmax())
            ids.append(tok)
            out.append(tok)
            if tok == eos:
                break
    return out


@pytest.fixture(scope="module")
def models():
    target = tiny_gpt(vocab=16, layers=2, width=32, seed=0, init=0.2)
    draft = tiny_gpt(vocab=16, layers=1, width=16, seed=1, init=0.2)
    return target, draft


def make_decoder(target, draft, **kw) -> SpeculativeDecoder:
    kw.setdefault("eos_token_id", None)  # the reference decodes past the model's own end-of-text token
    drafters = {"model": ModelDrafter(draft), "pld": PromptLookupDrafter(), "suffix": SuffixMatchDrafter()}
    return SpeculativeDecoder(target, drafters, lengths=[1, 3, 6], **kw)


PROMPTS = [
    [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2],  # copy-heavy
    [7, 3, 9, 9, 2, 11, 4],
]


# --------------------------------------------------------------------------- greedy losslessness
def test_greedy_output_equals_plain_greedy_for_every_arm_and_policy(models):
    target, draft = models
    dec = make_decoder(target, draft)
    assert [a.label for a in dec.arms][:3] == ["plain", "model:1", "model:3"] and len(dec.arms) == 10
    for prompt in PROMPTS:
        reference = plain_greedy(target, prompt, 30)
        for arm in range(len(dec.arms)):
            res = dec.generate(prompt, arm=arm, max_new_tokens=30)
            assert res.tokens == reference, dec.arms[arm].label
            assert sum(res.emitted) == 30 and all(1 <= y <= dec.arms[arm].length + 1 for y in res.emitted)
        for name in ("UCB1", "EXP3", "UCBSpec", "EXP3Spec"):
            res = dec.generate(prompt, policy=name, max_new_tokens=30, seed=3)
            assert res.tokens == reference, name
        for _ in range(3):  # the default: the serving policy, its state carried from call to call
            assert dec.generate(prompt, max_new_tokens=30).tokens == reference
    # the reference agrees with transformers' own greedy generate
    hf = target.generate(torch.tensor([PROMPTS[1]]), max_new_tokens=30, do_sample=False, pad_token_id=0, eos_token_id=None)
    assert hf[0, len(PROMPTS[1]) :].tolist() == plain_greedy(target, PROMPTS[1], 30)


def test_drafting_with_the_target_itself_accepts_every_token(models):
    """Draft = target: every round emits k + 1 tokens (a wrong cache crop or an off-by-one breaks this)."""
    target, _ = models
    dec = SpeculativeDecoder(target, {"self": ModelDrafter(target)}, lengths=[3], include_plain=False, eos_token_id=None)
    res = dec.generate(PROMPTS[1], arm="self:3", max_new_tokens=25)
    assert res.emitted == [4] * 6 + [1]
    assert res.tokens == plain_greedy(target, PROMPTS[1], 25)



def test_serving_policy_learns_what_a_copier_would_have_emitted_in_other_arms_rounds(models):
    """Greedy decoding: at the start of every round of another arm the copier's draft is taken, and compared with the text
    once the text covers or refutes it: exactly what the copier's longest arm would have emitted (no time). A copier with
    no draft at a round's start is asleep there: neither played nor observed."""
    target, _ = models
    dec = SpeculativeDecoder(target, {"self": ModelDrafter(target), "suffix": SuffixMatchDrafter()}, lengths=[1, 3], include_plain=False,
                             eos_token_id=None)
    policy = dec.make_policy("WarmThroughputUCB", seed=0)
    res = dec.generate(PROMPTS[1] + PROMPTS[0], policy=policy, max_new_tokens=60)
    assert res.tokens == plain_greedy(target, PROMPTS[1] + PROMPTS[0], 60)
    labels = [arm.label for arm in dec.arms]
    own = {label: sum(1 for a in res.arms if labels[a] == label) for label in labels}
    counted = policy._current[0, :, 1]
    assert own["self:3"] > 0 and own["suffix:3"] + own["suffix:1"] < res.rounds  # both drafters played
    # where each round starts, and whether the copier had a draft there
    starts = np.cumsum([0] + res.emitted[:-1])
    copier = SuffixMatchDrafter()
    copier.start(len(PROMPTS[1] + PROMPTS[0]))
    awake = [bool(copier.propose(PROMPTS[1] + PROMPTS[0] + res.tokens[:s], 3).tokens) for s in starts]
    assert not all(awake) and not any(not up and dec.arms[a].drafter == "suffix" for a, up in zip(res.arms, awake))  # asleep: not played
    # every round but suffix:3's where the copier has a draft gives suffix:3 one observation (but for the last ones, if the text
    # ends before their draft is covered or refuted); suffix:1 counts its own rounds, suffix:3's (its prefix) and the other
    # drafter's observations
    for rounds, observed in (([s for a, s, up in zip(res.arms, starts, awake) if labels[a] != "suffix:3" and up],
                              counted[labels.index("suffix:3")] - own["suffix:3"]),
                             ([s for a, s, up in zip(res.arms, starts, awake) if dec.arms[a].drafter != "suffix" and up],
                              counted[labels.index("suffix:1")] - own["suffix:1"] - own["suffix:3"])):
        assert sum(start <= len(res.tokens) - 3 for start in rounds) <= observed <= len(rounds)
    # the model drafter is observed too, from its catch-up passes (test_model_drafter_observations_are_what_its_rounds_would_have_emitted)
    assert counted[labels.index("self:1")] > own["self:1"] + own["self:3"]
    assert policy._current[0, labels.index("suffix:1"), 3] == own["suffix:1"]  # no time from a side observation
    assert policy._current[0, labels.index("self:1"), 3] == own["self:1"]



def test_model_drafter_observations_are_what_its_rounds_would_have_emitted(models):
    """Greedy decoding: before a round of a model drafter's arm, the drafter catches up on the text it sat out, and each round
    it sat out is counted as what its longest arm would have emitted there: the teacher-forced predictions match the text for
    exactly as many tokens as a draft made from that round's start would have been accepted (where the text ended while the
    draft still matched, the longest arm it covers). Checked against drafts made afresh at each round's start, on a scripted
    choice of arms; the output stays the target's greedy decoding."""
    from genbandit.policies.speculative_serving import WarmThroughputUCB

    class Scripted(WarmThroughputUCB):
        def _select(self, contexts, asleep=0):
            return np.array([self.script[self.step % len(self.script)]])

        def _play(self, arm, tokens, seconds, observed=(), asleep=0):
            self.step += 1
            return int(self._select(None)[0])

        def observe(self, arm, tokens):
            self.seen.append((int(arm), float(tokens), self.step))
            return self

    target, draft = models
    dec = SpeculativeDecoder(target, {"model": ModelDrafter(draft)}, lengths=[2, 4], eos_token_id=None)
    policy = dec.make_policy("WarmThroughputUCB")
    policy.__class__ = Scripted
    policy.script, policy.step, policy.seen = [0, 0, 0, 2, 0, 0, 1], 0, []  # plain, plain, plain, model:4, plain, plain, model:2
    prompt = PROMPTS[1]
    res = dec.generate(prompt, policy=policy, max_new_tokens=80)
    assert res.tokens == plain_greedy(target, prompt, 80)
    text = prompt + res.tokens
    starts = list(len(prompt) + np.cumsum([0] + res.emitted[:-1]))
    expected = []
    for m, arm in enumerate(res.arms):  # at each model round m: the rounds since the drafter's last one, seen on the text so far
        if arm == 0:
            continue
        sat_out = [j for j in range(m) if res.arms[j] == 0 and not any(res.arms[i] != 0 for i in range(j + 1, m))]
        for j in sat_out:
            fresh = ModelDrafter(draft)
            fresh.start(len(prompt))
            guess = fresh.propose(text[: starts[j]], 4).tokens
            accepted = next((i for i, t in enumerate(guess) if starts[j] + i >= starts[m] or t != text[starts[j] + i]), 4)
            if accepted == 4 or starts[j] + accepted < starts[m]:
                expected.append((2, accepted + 1.0, m))
            elif accepted >= 2:
                expected.append((1, 3.0, m))
    assert len(expected) >= 20 and any(t < 5 for _, t, _ in expected)  # enough rounds, some refuted
    assert policy.seen == expected

def test_copy_heavy_prompt_gets_a_higher_mat_from_copiers(models):
    target, draft = models
    dec = make_decoder(target, draft)
    prompt = PROMPTS[0]
    plain = dec.generate(prompt, arm="plain", max_new_tokens=60)
    suffix = dec.generate(prompt, arm="suffix:6", max_new_tokens=60)
    assert plain.mat == 1.0 and plain.rounds == 60
    assert suffix.tokens == plain.tokens and suffix.rounds < plain.rounds  # the output repeats itself: copies pay


def test_eos_stops_generation_and_is_kept(models):
    target, draft = models
    reference = plain_greedy(target, PROMPTS[1], 40)
    eos = reference[7]  # make the 8th greedy token the end of text
    dec = make_decoder(target, draft, eos_token_id=eos)
    first = reference.index(eos)
    for arm in ("plain", "model:6", "suffix:6", "pld:3"):
        res = dec.generate(PROMPTS[1], arm=arm, max_new_tokens=40)
        assert res.tokens == reference[: first + 1]


def test_context_limit_is_respected():
    target = tiny_gpt(vocab=16, layers=1, width=16, seed=4, positions=24)
    dec = SpeculativeDecoder(target, {"suffix": SuffixMatchDrafter(min_match=1)}, lengths=[6], eos_token_id=None)
    res = dec.generate(PROMPTS[0], arm="suffix:6", max_new_tokens=50)
    assert len(res.tokens) == 24 + 1 - len(PROMPTS[0])  # the last token is predicted at position 23
    assert res.tokens == plain_greedy(target, PROMPTS[0], 24 + 1 - len(PROMPTS[0]))


# --------------------------------------------------------------------------- sampling losslessness
def _sequence_law(model: GPT2LMHeadModel, prompt: list[int], n: int, vocab: int, temperature: float) -> np.ndarray:
    """Exact law of the next ``n`` sampled tokens, ``(vocab ** n,)`` in lexicographic order."""
    law = np.ones(1)
    with torch.no_grad():
        for depth in range(n):
            prefixes = list(itertools.product(range(vocab), repeat=depth))
            batch = torch.tensor([prompt + list(p) for p in prefixes])
            probs = torch.softmax(model(batch).logits[:, -1] / temperature, dim=-1).numpy()
            law = (law[:, None] * probs).reshape(-1)
    return law


@pytest.mark.parametrize("policy_name", ["EXP3", "WarmThroughputUCB"])
def test_sampling_matches_the_target_distribution_chi_square(policy_name):
    vocab, n_new, temperature, n_samples = 3, 3, 1.0, 800
    target = tiny_gpt(vocab=vocab, layers=1, width=16, seed=10, init=0.8)
    draft = tiny_gpt(vocab=vocab, layers=1, width=8, seed=11, init=0.8)
    prompt = [0, 1, 2, 1, 0, 1]  # the suffix drafter finds copies in it
    p = _sequence_law(target, prompt, n_new, vocab, temperature)
    q = _sequence_law(draft, prompt, n_new, vocab, temperature)
    drafters = {"model": ModelDrafter(draft), "suffix": SuffixMatchDrafter(min_match=1)}
    dec = SpeculativeDecoder(target, drafters, lengths=[1, 3], temperature=temperature, eos_token_id=None)
    policy = dec.make_policy(policy_name, seed=0)  # the bandit mixes arms (on timings, for the serving policy); the law must not care
    counts = np.zeros(vocab**n_new)
    rounds = []
    for i in range(n_samples):
        res = dec.generate(prompt, policy=policy, max_new_tokens=n_new, seed=i)
        counts[int(np.ravel_multi_index(res.tokens, (vocab,) * n_new))] += 1
        rounds.append(res.rounds)
    assert np.mean(rounds) < n_new  # drafts were accepted: the speculative path was exercised
    big = p * n_samples >= 5  # pool cells with small expectations
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(p[big], p[~big].sum()) * n_samples
    chi2, pvalue = stats.chisquare(observed, expected)
    assert pvalue > 0.01, (chi2, pvalue)
    # power: had the decoder emitted the draft's law, the expected statistic would be far past the 1% cut
    q_pooled = np.append(q[big], q[~big].sum()) * n_samples
    noncentral = float(np.sum((q_pooled - expected) ** 2 / expected))
    assert noncentral > 3 * stats.chi2.ppf(0.99, len(expected) - 1)


class AlwaysTwo(PromptLookupDrafter):
    """A copier whose draft is always token 2, whatever the text."""

    def propose(self, ids, k, **kw):
        return Draft([2] * k)


def test_a_side_observation_under_sampling_has_the_law_of_the_copiers_own_round():
    """Under sampling the verifier keeps a point-mass draft's token x with probability P(x), the probability that the
    lossless text's token is x: the tokens on which the sampled text agrees with a copier's draft are distributed as those
    its own round would keep. A policy that always plays plain decoding records the side observations of a copier whose
    draft is always [2, 2, 2]; the first of each response must follow the exact law of that copier's round there."""
    vocab, temperature, n = 3, 1.0, 1500
    target = tiny_gpt(vocab=vocab, layers=1, width=16, seed=10, init=0.8)
    prompt = [0, 1, 2, 1, 0, 1]

    class PlainRecordingObservations:
        n_runs, feedback_keys = 1, ("tokens", "seconds")

        def __init__(self, n_arms, plain):
            self.n_arms, self.plain, self.first = n_arms, plain, []

        def begin_response(self):
            self.seen = []

        def _select(self, contexts):
            return np.array([self.plain])

        def _learn(self, arms, feedback, contexts):
            pass

        def observe(self, arm, tokens):
            if not self.seen:
                self.first.append(int(tokens))
            self.seen.append(tokens)

    dec = SpeculativeDecoder(target, {"always": AlwaysTwo()}, lengths=[3], temperature=temperature, eos_token_id=None)
    policy = PlainRecordingObservations(len(dec.arms), dec.arm_index("plain"))
    for seed in range(n):
        dec.generate(prompt, policy=policy, max_new_tokens=3, seed=seed)
    assert len(policy.first) == n  # the draft at the response's start is covered or refuted within its 3 tokens
    # the copier's own round from the prompt emits min(A, 3) + 1 tokens, P(A >= j) = P(the first j tokens are all 2)
    law = _sequence_law(target, prompt, 3, vocab, temperature).reshape(vocab, vocab, vocab)
    at_least = [1.0, law[2].sum(), law[2, 2].sum(), law[2, 2, 2]]
    expected = np.array([at_least[j] - (at_least[j + 1] if j < 3 else 0.0) for j in range(4)]) * n
    assert expected.min() > 0.03 * n  # every outcome is common: the test has power on each
    counts = np.bincount(policy.first, minlength=5)[1:]
    assert stats.chisquare(counts, expected).pvalue > 0.01
    # and the copier's own first rounds (4 tokens asked, so that it drafts its 3) follow the same law
    own = np.bincount([dec.generate(prompt, arm="always:3", max_new_tokens=4, seed=seed).emitted[0] for seed in range(n)], minlength=5)[1:]
    assert stats.chisquare(own, expected).pvalue > 0.01


def test_point_mass_rejection_rule_is_exact():
    """A copier's draft (Q = delta_x) at one position: emitted law equals P exactly (checked by enumeration)."""
    vocab = 5
    target = tiny_gpt(vocab=vocab, layers=1, width=8, seed=3, init=0.8)

    dec = SpeculativeDecoder(target, {"always": AlwaysTwo()}, lengths=[1], include_plain=False, temperature=1.0, eos_token_id=None)
    p = _sequence_law(target, [1], 1, vocab, 1.0)
    n = 1500
    counts = np.bincount([dec.generate([1], arm=0, max_new_tokens=1, seed=s).tokens[0] for s in range(n)], minlength=vocab)
    assert stats.chisquare(counts, p * n).pvalue > 0.01
    assert float(np.sum((np.eye(vocab)[2] * n - p * n) ** 2 / (p * n))) > 100  # always emitting the draft would fail


# --------------------------------------------------------------------------- drafters
def test_prompt_lookup_prefers_longest_ngram_and_latest_occurrence():
    d = PromptLookupDrafter(max_ngram=3)
    prompt = [1, 2, 3, 7, 9, 2, 3, 8, 1, 2, 3]
    d.start(len(prompt))
    assert d.propose(prompt, 2).tokens == [7, 9]  # "1 2 3" at 0..2 beats the later "2 3" at 5..6
    assert d.propose(prompt + [9, 2, 3], 4).tokens == [8, 1, 2, 3]  # "9 2 3" at 4..6
    assert d.propose(prompt + [5, 3], 4).tokens == [8, 1, 2, 3]  # only "3" matches; latest occurrence at 6
    assert d.propose(prompt + [3, 8, 1, 2], 9).tokens == [3]  # truncated at the prompt's end
    assert d.propose(prompt + [42], 3).tokens == [] and d.propose(prompt, 0).tokens == []


def test_prompt_lookup_matches_brute_force():
    """The n-gram walk equals the rule as stated: sizes max_ngram down to min_ngram, the latest occurrence in the prompt."""
    rng = random.Random(1)
    for trial in range(40):
        prompt = [rng.randrange(2 + trial % 5) for _ in range(rng.randrange(1, 30))]
        min_ngram = 1 + trial % 2
        d = PromptLookupDrafter(max_ngram=3, min_ngram=min_ngram)
        d.start(len(prompt))
        text = list(prompt)
        for _ in range(12):
            expected = []
            for n in range(min(3, len(text)), min_ngram - 1, -1):
                ends = [end for end in range(n, len(prompt)) if prompt[end - n : end] == text[len(text) - n :]]
                if ends:
                    expected = prompt[ends[-1] : ends[-1] + 4]
                    break
            assert d.propose(text, 4).tokens == expected
            text.append(rng.randrange(2 + trial % 5))


def _longest_earlier_suffix(seq: list[int]) -> int:
    n = len(seq)
    best = 0
    for length in range(1, n):
        suffix = seq[n - length :]
        if any(seq[j : j + length] == suffix for j in range(0, n - length)):
            best = length
    return best


def test_suffix_automaton_matches_brute_force():
    rng = random.Random(0)
    for trial in range(30):
        seq = [rng.randrange(3 if trial % 2 else 6) for _ in range(rng.randrange(2, 60))]
        d = SuffixMatchDrafter(min_match=1)
        d.start(len(seq) // 2)
        for cut in range(1, len(seq) + 1):  # grow the sequence one token (or several) at a time
            if cut % 3 and cut != len(seq):
                continue
            draft = d.propose(seq[:cut], 4).tokens
            length = _longest_earlier_suffix(seq[:cut])
            assert d._match_len == length
            if length == 0:
                assert draft == []
                continue
            # the draft continues an earlier occurrence of the matched suffix
            s = seq[:cut]
            ends = [e for e in range(length - 1, cut - 1) if s[e - length + 1 : e + 1] == s[cut - length :]]
            expected = []
            for j in range(ends[0] + 1, ends[0] + 5):  # overlapping copy past the end of the sequence
                expected.append(s[j] if j < cut else expected[j - cut])
            assert draft == expected


def test_suffix_drafter_restarts_when_the_sequence_changes():
    d = SuffixMatchDrafter()
    d.start(3)
    assert d.propose([1, 2, 3, 1, 2], 2).tokens == [3, 1]
    assert d.propose([4, 5, 4, 5], 2).tokens == [4, 5]  # a different sequence: rebuilt, not appended


@pytest.mark.parametrize("followed", [False, True])
def test_suffix_drafter_follows_a_list_grown_or_edited_in_place(followed):
    """The decoder appends to one list: given it again, the drafter drafts as from a copy, and given to follow() (the decoder's
    promise that it is only appended to) its new tokens are read without comparing the rest. Edited in place, a list not
    followed rebuilds the automaton; any other sequence is compared, rebuilds it and unfollows the followed list."""
    rng = random.Random(2)
    seq = [rng.randrange(4) for _ in range(80)]
    grown, fresh = SuffixMatchDrafter(), SuffixMatchDrafter()
    grown.start(10)
    text = seq[:10]
    if followed:
        grown.follow(text)
    for cut in range(11, len(seq), 3):
        text.extend(seq[len(text) : cut])
        fresh.start(10)
        assert grown.propose(text, 5).tokens == fresh.propose(list(text), 5).tokens
        assert grown._seq == text  # read as it grew, never rebuilt
    if followed:  # another list (its last token changed), then the followed list again, grown: each compared, rebuilt
        other = text[:-1] + [(text[-1] + 1) % 4]
        text.append(seq[0])
        edits = [other, text]
    else:  # the same list, its last seen token edited, then a token in the middle, grown: each rebuilt
        text[-1] = (text[-1] + 1) % 4
        edits = [text, text]
    for edited in edits:
        fresh.start(10)
        assert grown.propose(edited, 5).tokens == fresh.propose(list(edited), 5).tokens and grown._seq == edited
        assert grown._text is None
        text[5:7] = [3, 3]
        text.extend([1, 2])
    assert grown.propose([9, 8, 9, 8], 2).tokens == [9, 8]  # another list: compared, rebuilt


def test_model_drafter_cache_follows_rejections(models):
    _, draft = models
    d = ModelDrafter(draft)
    seq = [3, 1, 4, 1, 5]
    d.start(len(seq))
    first = d.propose(seq, 4).tokens
    assert first == plain_greedy(draft, seq, 4)
    diverged = seq + [first[0], (first[1] + 1) % 16]  # the target rejected the second draft token
    assert d.propose(diverged, 3).tokens == plain_greedy(draft, diverged, 3)
    assert len(d._cached) == len(diverged) + 2  # cache = accepted prefix + two new drafts fed
    assert d.propose(seq[:2], 2).tokens == plain_greedy(draft, seq[:2], 2)  # a shorter sequence crops further


# --------------------------------------------------------------------------- the BanditSpec loop
class _LengthAware(Policy):
    """A policy that takes L, like UCBSpec: it must see raw emitted tokens in [1, L + 1]."""

    name = "length-aware-test"

    def __init__(self, n_arms: int, L: int = 1, seed=None) -> None:
        self.n_arms = n_arms
        self.L = L
        self.seed = seed

    def _init_state(self, n_runs):
        self._seen = []

    def _select(self, contexts):
        return np.zeros(self._n_runs, dtype=np.int64)

    def _update(self, actions, feedback, contexts):
        self._seen.append(float(feedback[0]))


def test_rewards_reach_policies_on_their_scale(models):
    from genbandit.policies.classic import EXP3, UCB1

    assert policy_reward(UCB1(n_arms=2), 5.0, 4) == 1.0 and policy_reward(EXP3(n_arms=2), 1.0, 4) == 0.0
    assert policy_reward(_LengthAware(n_arms=2, L=4), 3.0, 4) == 3.0
    policy = make_policy("UCB1", n_arms=4, max_length=6)
    assert policy.n_arms == 4
    target, draft = models
    dec = make_decoder(target, draft)
    aware = _LengthAware(n_arms=len(dec.arms), L=dec.max_length)
    res = dec.generate(PROMPTS[0], policy=aware, max_new_tokens=30)
    assert aware._seen == [float(y) for y in res.emitted]  # policy state started empty, one reward per round
    tput = dec.generate(PROMPTS[0], policy="UCB1", max_new_tokens=30, reward="throughput", seed=1)
    assert tput.tokens == plain_greedy(target, PROMPTS[0], 30)


def test_serving_policy_is_the_default_and_carries_its_state(models):
    from genbandit.specdec import cli, decoder

    target, draft = models
    dec = make_decoder(target, draft)
    first = dec.generate(PROMPTS[0], max_new_tokens=40)
    # the first response tries plain decoding and each drafter at its longest arm first (whose rounds estimate its shorter
    # ones), a copier once it has a draft (plain decoding stands in while none has one)
    longest = {max((i for i, arm in enumerate(dec.arms) if arm.drafter == arm_i.drafter), key=lambda i: dec.arms[i].length)
               for arm_i in dec.arms}
    for drafter in [None, *dec.drafters]:
        played = [a for a in first.arms if dec.arms[a].drafter == drafter]
        assert played and played[0] in longest
    second = dec.generate(PROMPTS[0], max_new_tokens=40)
    assert len(set(second.arms[: len(dec.arms)])) < len(dec.arms)  # the next one starts from what it learned
    assert type(dec.serving_policy).__name__ == decoder.SERVING_POLICY == cli.SERVING_POLICY


def test_policy_resets_per_prompt_and_arm_counts(models):
    target, draft = models
    dec = make_decoder(target, draft)
    policy = dec.make_policy("UCB1", seed=0)
    a = dec.generate(PROMPTS[0], policy=policy, max_new_tokens=30, seed=5)
    b = dec.generate(PROMPTS[0], policy=policy, max_new_tokens=30, seed=5)
    assert a.arms == b.arms  # the second prompt does not inherit the first one's statistics
    assert a.arms[: len(dec.arms)] != [] and sum(a.arm_counts().values()) == a.rounds


def test_bad_arguments_raise(models):
    from genbandit.core.validation import InvalidInputError, InvalidParameterError

    target, draft = models
    dec = make_decoder(target, draft)
    with pytest.raises(InvalidParameterError):
        dec.generate([1, 2], arm="nope:3")
    with pytest.raises(InvalidParameterError):
        dec.generate([1, 2], policy=dec.make_policy("UCB1"), arm=0)
    with pytest.raises(InvalidInputError):
        dec.generate([], arm=0)
    with pytest.raises(InvalidParameterError):
        dec.generate([1], policy=make_policy("UCB1", n_arms=3, max_length=6))


# --------------------------------------------------------------------------- CLI
def test_cli_generate_on_saved_models(tmp_path, capsys):
    from genbandit.cli import main

    torch.manual_seed(0)
    config = dict(vocab_size=257, n_positions=128, n_head=2, bos_token_id=256, eos_token_id=256)
    GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, **config)).save_pretrained(tmp_path / "target")
    GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, **config)).save_pretrained(tmp_path / "draft")
    argv = ["specdec", "generate", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft")]
    argv += ["--prompt", "def f(x):\n    return x", "--max-new-tokens", "20", "--policy", "UCB1", "--check"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "MAT" in out and "tokens/s" in out and "identical to plain greedy decoding: yes" in out
