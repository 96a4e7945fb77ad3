"""Lossless speculative decoding on Hugging Face causal LMs, with the arm chosen by a bandit each round.

One *round* (SpecDecSub, Algorithm 2 of Hou et al., ICML 2025) = one drafter proposes up to ``k`` tokens, the target
scores them all in ONE forward pass over its KV cache, and the round emits the accepted tokens plus
one token of the target's (the correction or the bonus): ``1 <= Y <= k + 1`` tokens.

* Greedy (``temperature == 0``): draft tokens are kept while they equal the target's argmax, then
  the target's argmax is appended, so the output is token for token the target's greedy decoding.
* Sampling (``temperature > 0``): Algorithm 6 of Hou et al. (2025), vanilla speculative decoding
  (Leviathan et al., 2023; Chen et al., 2023): accept draft token ``x`` with probability ``min(1, P(x) / Q(x))``, otherwise emit a token
  drawn from ``Norm([P - Q]_+)`` and stop; after ``k`` acceptances draw a bonus token from ``P``.
  Copiers propose point masses (``Q = delta_x``), for which the rule reads: accept with probability
  ``P(x)``, else draw from ``P`` with ``x`` removed.

Both models keep KV caches. The target's cache always holds every token except the last one (the
"pending" token fed first in the next round) and is cropped after a rejection; a model drafter
crops its own cache to the prefix it shares with the accepted text.

The *BanditSpec loop* (Algorithm 3 of Hou et al., 2025): per prompt the policy is reset (its state starts empty),
each round it selects an arm (drafter x speculation length; length 0 is plain decoding), and it is
updated with the number of emitted tokens, or, for serving, with the round's normalised throughput.
A policy that learns across responses (``begin_response``, e.g. the default
:class:`~genbandit.policies.speculative_serving.WarmThroughputUCB`) keeps its state from call to
call and gets each round's tokens and wall time, the copiers' side observations (exact under greedy
decoding, equal in law under sampling), under greedy decoding the model drafters' too (from the catch-up pass a
model drafter makes before a round of its arms) and, with ``_play``, chooses only among the arms that can draft
(a copier with no match is asleep: its round would be a plain one).
"""

from __future__ import annotations

import inspect
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..core.base import Policy
from ..core.registry import POLICIES
from ..core.validation import InvalidInputError, InvalidParameterError
from .drafters import Draft, Drafter
from .tensors import cached_forward, check_causal_lm, context_length, crop_cache, keep_past, tempered_probs, vocab_size

__all__ = ["Arm", "GenerationResult", "SpeculativeDecoder", "crop_cache", "tempered_probs", "make_policy", "SERVING_POLICY"]

#: The policy :meth:`SpeculativeDecoder.generate` uses when given neither ``policy`` nor ``arm``.
SERVING_POLICY = "WarmThroughputUCB"

#: ``generation_config`` settings under which ``generate(do_sample=False)`` is no longer the model's argmax, with their
#: neutral values: the decoder decodes the model's own distribution and warns when a target's configuration sets one.
_LOGITS_PROCESSING = {
    "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "bad_words_ids": None, "min_length": 0, "min_new_tokens": None,
    "suppress_tokens": None, "begin_suppress_tokens": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
    "sequence_bias": None, "exponential_decay_length_penalty": None,
}

#: Names under which a BanditSpec-aware policy takes the maximum speculation length ``L``.
_L_PARAMETER_NAMES = ("L", "max_length", "spec_length", "max_speculation_length")


@dataclass(frozen=True)
class Arm:
    """One speculative decoding configuration: a drafter and a speculation length (0 = plain decoding)."""

    drafter: str | None
    length: int

    @property
    def label(self) -> str:
        return "plain" if self.length == 0 else f"{self.drafter}:{self.length}"


@dataclass
class GenerationResult:
    """What one call of :meth:`SpeculativeDecoder.generate` produced and how.

    ``tokens`` the new tokens (EOS included when reached); ``arms`` the arm index of every round;
    ``emitted`` the tokens each round emitted (``Y``, truncated at EOS and at ``max_new_tokens``);
    ``round_seconds`` the wall time of every round; ``seconds`` the whole call (prefill included).
    """

    tokens: list[int]
    arms: list[int] = field(default_factory=list)
    emitted: list[int] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)
    seconds: float = 0.0
    prefill_seconds: float = 0.0
    arm_labels: list[str] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        """Stopping time: target verification passes."""
        return len(self.arms)

    @property
    def mat(self) -> float:
        """Mean tokens emitted per target verification pass (bonus token included; 1.0 for plain decoding)."""
        return float(np.mean(self.emitted)) if self.emitted else 0.0

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else 0.0

    def arm_counts(self) -> dict[str, int]:
        counts = np.bincount(np.asarray(self.arms, dtype=np.int64), minlength=len(self.arm_labels))
        return {label: int(c) for label, c in zip(self.arm_labels, counts)}


def _accepts_length(cls: type) -> str | None:
    params = inspect.signature(cls.__init__).parameters
    return next((name for name in _L_PARAMETER_NAMES if name in params), None)


def make_policy(name: str, n_arms: int, max_length: int, **params: Any) -> Policy:
    """Create the registered policy ``name`` for ``n_arms`` arms, passing ``L`` if it takes one.

    Resolved through the registry when called, so names registered later (``"UCBSpec"``,
    ``"EXP3Spec"``) work as soon as their module is importable.
    """
    cls = POLICIES.get(name)
    key = _accepts_length(cls)
    if key is not None and key not in params:
        params[key] = max_length
    policy = POLICIES.create(name, n_arms=n_arms, **params)
    if getattr(policy, "contextual", False) or getattr(policy, "action_kind", "arm") != "arm":
        raise InvalidParameterError(f"The BanditSpec loop needs a non-contextual arm policy. Got {name!r}.")
    return policy


def policy_reward(policy: Policy, y: float, max_length: int) -> float:
    """Map a reward on the paper's scale ``[1, L + 1]`` (tokens emitted per round) to what ``policy`` expects.

    A policy that takes ``L`` (UCBSpec, EXP3Spec) gets ``y`` as is; any other policy gets ``y``
    mapped linearly onto its ``reward_range`` (``[0, 1]`` when it declares none, since UCB1-style
    confidence bonuses assume rewards in [0, 1]).
    """
    bounds = policy.reward_range
    if _accepts_length(type(policy)) is not None and (bounds is None or bounds[0] <= y <= bounds[1]):
        return float(y)
    lo, hi = bounds if bounds is not None else (0.0, 1.0)
    return float(lo + (hi - lo) * (y - 1.0) / max(max_length, 1))


def _round_by_public_calls(policy: Policy):
    """The decoder's round for a timed policy without the one-call ``_play``, through its steps: learn from the round, count the
    side observations ``observe`` takes (a copier that did not play, ``above < 0``; a longer arm of the played copier has no
    public form), choose the next arm (among all arms: its ``select`` takes no awake arms). Returns ``(play, choose)``."""

    def play(arm: int, tokens: float, seconds: float, observed: Sequence[tuple[int, float, float]], asleep: int) -> int:
        policy._learn(np.array([arm]), {"tokens": np.array([tokens]), "seconds": np.array([seconds])}, None)
        for other, other_tokens, above in observed:
            if above < 0:
                policy.observe(other, other_tokens)
        return int(policy._select(None)[0])

    return play, lambda asleep: int(policy._select(None)[0])


class SpeculativeDecoder:
    """Speculative decoding of a Hugging Face causal LM with drafters x speculation lengths as arms.

    Parameters
    ----------
    target : transformers ``PreTrainedModel``
        Any decoder-only causal LM whose forward takes ``past_key_values`` and returns a croppable
        cache (checked here with one forward pass of one token; a model that cannot serve raises
        :class:`InvalidParameterError` saying what it lacks).
    drafters : mapping name -> :class:`~genbandit.specdec.drafters.Drafter`
        The drafters (a :class:`ModelDrafter` must share the target's tokenizer; its architecture,
        dtype, context and embedding size may differ).
    lengths : sequence of int
        Speculation lengths every drafter is paired with; ``L = max(lengths)``.
    include_plain : bool
        Add the arm "plain" (length 0: canonical decoding, MAT 1) first.
    temperature : float
        0 for greedy decoding; otherwise sampling from ``softmax(logits / temperature)``.
    eos_token_id : int, sequence of int, None or "model"
        Generation stops after this token, or any of these (it is kept in the output). ``"model"``
        (the default) takes the target's ``generation_config.eos_token_id``, as ``generate`` does;
        None never stops early.

    Examples
    --------
    >>> import torch
    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> from genbandit.specdec import SpeculativeDecoder, SuffixMatchDrafter
    >>> _ = torch.manual_seed(0)
    >>> target = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=64, n_embd=16, n_layer=1, n_head=2)).eval()
    >>> dec = SpeculativeDecoder(target, {"suffix": SuffixMatchDrafter()}, lengths=[2, 4])
    >>> [arm.label for arm in dec.arms]
    ['plain', 'suffix:2', 'suffix:4']
    >>> prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    >>> plain = dec.generate(prompt, arm="plain", max_new_tokens=12)
    >>> spec = dec.generate(prompt, policy="UCB1", max_new_tokens=12, seed=0)
    >>> spec.tokens == plain.tokens, plain.mat, spec.rounds <= plain.rounds
    (True, 1.0, True)
    >>> served = dec.generate(prompt, max_new_tokens=12)  # the serving policy, learning across calls
    >>> served.tokens == plain.tokens
    True
    """

    def __init__(
        self,
        target: Any,
        drafters: Mapping[str, Drafter],
        lengths: Sequence[int] = (1, 2, 4),
        *,
        include_plain: bool = True,
        temperature: float = 0.0,
        eos_token_id: int | Sequence[int] | None | str = "model",
    ) -> None:
        lengths = sorted({int(k) for k in lengths if int(k) > 0})
        if not drafters and not include_plain:
            raise InvalidParameterError("SpeculativeDecoder needs at least one arm.")
        if drafters and not lengths:
            raise InvalidParameterError(f"lengths must hold a positive speculation length. Got {lengths!r} instead.")
        if temperature < 0 or not np.isfinite(temperature):
            raise InvalidParameterError(f"temperature must be >= 0. Got {temperature!r} instead.")
        # where the target's logits come out (its last layer's device, for a model spread over several): the sampler's
        # random generator lives there, since torch draws only with a generator on the tensor's own device
        self._logits_device = check_causal_lm(target, "target")
        self.target = target
        self.drafters = dict(drafters)
        self.lengths = lengths
        self.temperature = float(temperature)
        generation_config = getattr(target, "generation_config", None)
        if isinstance(eos_token_id, str):
            if eos_token_id != "model":
                raise InvalidParameterError(f"eos_token_id must be an int, a list of ints, None or 'model'. Got {eos_token_id!r} instead.")
            eos_token_id = getattr(generation_config, "eos_token_id", None)
        self.eos_token_id = eos_token_id
        # a list is a set of stop tokens (Llama 3's instruction models end a turn with any of several)
        self._eos = frozenset() if eos_token_id is None else frozenset(
            [int(eos_token_id)] if isinstance(eos_token_id, (int, np.integer)) else [int(t) for t in eos_token_id])
        changed = [f"{key}={getattr(generation_config, key)!r}" for key, neutral in _LOGITS_PROCESSING.items()
                   if getattr(generation_config, key, None) not in (neutral, None, [], {})]
        if changed:
            warnings.warn(f"The target's generation_config sets {', '.join(changed)}: transformers' generate applies these to the "
                          "logits, this decoder decodes the model's own distribution (compare with generate given the neutral values).",
                          stacklevel=2)
        self.arms = ([Arm(None, 0)] if include_plain else []) + [Arm(name, k) for name in self.drafters for k in lengths]
        self.max_length = max([arm.length for arm in self.arms])
        self._device = next(target.parameters()).device
        vocab = vocab_size(target)
        for name, drafter in self.drafters.items():
            model = getattr(drafter, "model", None)
            if model is not None:
                check_causal_lm(model, f"draft model {name!r}")
                drafter.vocab = vocab  # it drafts only the target's tokens (an embedding matrix may be padded to another size)
        # only the target's context bounds the text: a model drafter with a shorter one drafts from the tokens that fit
        self.max_positions = context_length(target) or 10**9
        self.serving_policy: Policy | None = None  # created on the first call without policy= or arm=

    # ------------------------------------------------------------------ arms and policies
    def arm_index(self, arm: int | str) -> int:
        """The index of ``arm``, given as an index or a label (``"plain"``, ``"pld:4"``)."""
        labels = [a.label for a in self.arms]
        if isinstance(arm, str):
            if arm not in labels:
                raise InvalidParameterError(f"Unknown arm {arm!r}. Arms: {', '.join(labels)}.")
            return labels.index(arm)
        if not 0 <= int(arm) < len(self.arms):
            raise InvalidParameterError(f"Unknown arm {arm!r}: arms are 0..{len(self.arms) - 1}.")
        return int(arm)

    def make_policy(self, name: str, **params: Any) -> Policy:
        """The registered policy ``name`` sized for this decoder's arms.

        ``L`` is passed when the policy takes one, and so are the arms' draft lengths and
        drafters (``arm_lengths``, ``arm_drafters``) when it takes them.
        """
        accepted = inspect.signature(POLICIES.get(name).__init__).parameters
        if "arm_lengths" in accepted and "arm_drafters" in accepted:
            params.setdefault("arm_lengths", [arm.length for arm in self.arms])
            params.setdefault("arm_drafters", [arm.drafter or "" for arm in self.arms])
        return make_policy(name, len(self.arms), self.max_length, **params)

    # ------------------------------------------------------------------ one round
    def _forward(self, tokens: list[int], cache: Any) -> tuple[torch.Tensor, Any]:
        # no attention mask and no position ids: batch size 1 has no padding, and every model tested derives the positions
        # (absolute or rotary) from the cache's length, which a crop sets back
        logits, extended = cached_forward(self.target, torch.tensor([tokens], device=self._device), cache)
        return logits[0], extended if cache is not None else keep_past(extended)

    def _verify(self, ids: list[int], draft: Draft, cache: Any, generator: torch.Generator) -> tuple[list[int], Any]:
        """One target pass over ``[ids[-1]] + draft``; returns the emitted tokens and the cropped cache."""
        d = draft.tokens
        logits, cache = self._forward([ids[-1]] + d, cache)  # (len(d) + 1, vocab)
        if self.temperature == 0:
            pred = torch.argmax(logits, dim=-1).tolist()
            a = 0
            while a < len(d) and d[a] == pred[a]:
                a += 1
            emitted = d[:a] + [pred[a]]
        else:
            p = tempered_probs(logits, self.temperature)
            emitted = []
            for i, x in enumerate(d):
                q_x = float(draft.probs[i, x]) if draft.probs is not None else 1.0
                p_x = float(p[i, x])
                if float(torch.rand((), generator=generator, device=generator.device)) * q_x <= p_x:  # r <= min(1, P(x)/Q(x))
                    emitted.append(x)
                    continue
                if draft.probs is not None:
                    residual = torch.clamp(p[i] - draft.probs[i].to(p.device, p.dtype), min=0.0)  # a draft on its own device, in its dtype
                else:
                    residual = p[i].clone()
                    residual[x] = 0.0
                if float(residual.sum()) <= 0.0:  # only reachable through rounding: P == Q
                    residual = p[i]
                emitted.append(int(torch.multinomial(residual / residual.sum(), 1, generator=generator)))
                break
            else:
                emitted.append(int(torch.multinomial(p[len(d)], 1, generator=generator)))  # bonus token
        cache = crop_cache(cache, len(ids) - 1 + len(emitted))  # keep everything but the new pending token
        return emitted, cache

    # ------------------------------------------------------------------ the loop
    def generate(
        self,
        prompt_ids: Sequence[int],
        *,
        policy: Policy | str | None = None,
        arm: int | str | None = None,
        max_new_tokens: int = 128,
        reward: str = "tokens",
        seed: int | None = None,
    ) -> GenerationResult:
        """Generate up to ``max_new_tokens`` tokens after ``prompt_ids`` (a list of token ids).

        With neither ``policy`` nor ``arm``, the decoder's own serving policy
        (:data:`SERVING_POLICY`, kept in ``self.serving_policy``) chooses the arms and carries what
        it learned from one call to the next. Otherwise give a fixed ``arm`` (index or label) or a
        ``policy`` (a :class:`Policy` sized for ``len(self.arms)`` arms, or a registered name, e.g.
        ``"UCBSpec"``). A policy with ``begin_response`` keeps its state across calls (pass the same
        object each time) and is fed each round's tokens and wall time; any other policy is reset
        at the start (BanditSpec's per-prompt state) and fed ``reward``: ``"tokens"`` (emitted
        tokens, the paper's reward) or ``"throughput"`` (the round's tokens/s over
        ``R_max = (L + 1) / c0``, clipped to 1 and put on the scale ``[1, L + 1]``, where ``c0`` is
        the measured time of a one-token target step at the start of the prompt). ``seed`` seeds
        the sampler and, when it is created here, the policy.
        """
        if policy is not None and arm is not None:
            raise InvalidParameterError("Give at most one of policy= and arm=.")
        if policy is None and arm is None:
            if self.serving_policy is None:
                self.serving_policy = self.make_policy(SERVING_POLICY, seed=seed)
            policy = self.serving_policy
        if reward not in ("tokens", "throughput"):
            raise InvalidParameterError(f"reward must be 'tokens' or 'throughput'. Got {reward!r} instead.")
        if max_new_tokens < 1:
            raise InvalidParameterError(f"max_new_tokens must be >= 1. Got {max_new_tokens!r} instead.")
        ids = [int(t) for t in prompt_ids]
        if not ids:
            raise InvalidInputError("The prompt must hold at least one token.")
        if len(ids) > self.max_positions:
            raise InvalidInputError(f"The prompt ({len(ids)} tokens) exceeds the models' context ({self.max_positions}).")
        fixed = None if arm is None else self.arm_index(arm)
        if isinstance(policy, str):
            policy = self.make_policy(policy, seed=seed)
        if policy is not None:
            if policy.n_arms != len(self.arms):
                raise InvalidParameterError(f"The policy has {policy.n_arms} arms; this decoder has {len(self.arms)}.")
            if hasattr(policy, "begin_response"):
                policy.begin_response()
            else:
                policy.reset() if seed is None else policy.reset(seed=seed)
            if policy.n_runs != 1:
                raise InvalidParameterError(f"The policy holds {policy.n_runs} runs; the decoder needs one (reset(n_runs=1)).")
        generator = torch.Generator(device=self._logits_device)
        generator.manual_seed(int(seed) if seed is not None else int(torch.seed() % 2**63))
        for drafter in self.drafters.values():
            drafter.start(len(ids))
            drafter.follow(ids)  # only appended to below: a copier reads only the new tokens of it each round

        result = GenerationResult(tokens=[], arm_labels=[a.label for a in self.arms])
        start = time.perf_counter()
        with torch.no_grad():
            cache = None
            if len(ids) > 1:
                _, cache = self._forward(ids[:-1], None)
            r_max = None
            timed = getattr(policy, "feedback_keys", None) == ("tokens", "seconds")
            if reward == "throughput" and not timed:
                t0 = time.perf_counter()
                _, cache = self._forward([ids[-1]], cache)
                r_max = (self.max_length + 1) / max(time.perf_counter() - t0, 1e-9)
                cache = crop_cache(cache, len(ids) - 1)
            result.prefill_seconds = time.perf_counter() - start
            # side observations: a copier's draft is a function of the text and free to make. Taken at the start of every
            # round that does not play the copier's longest arm and compared with the text once the text covers or refutes it
            # (in this round or a later one), it tells what that arm, and each shorter arm of the copier, would have emitted
            # there (those up to the played length, when the copier itself played, have the round already): exactly under
            # greedy decoding; in law under sampling, where the verifier keeps a point-mass draft's next token x with
            # probability P(x), the probability that the (lossless) text's next token is x, so the tokens the text agrees
            # with the draft on are distributed as the tokens the verifier would have kept. And a copier with no draft at a
            # round's start (nothing in its index matches) is asleep: its round would be a plain one, so it is not chosen and
            # not observed there (a sleeping bandit). Per copier: its name, the drafter, its longest arm, that arm's length,
            # and a bit per arm of the drafter (arms 0 to 62)
            copiers = [] if not timed or not hasattr(policy, "observe") else \
                [(name, drafter, longest, self.arms[longest].length, sum(1 << i for i in arms if i < 63)) for name, drafter in self.drafters.items()
                 if drafter.copier for arms in [[i for i, arm in enumerate(self.arms) if arm.drafter == name]]
                 for longest in [max(arms, key=lambda i: self.arms[i].length)]]

            # the model drafters' side observations, under greedy decoding: a model drafter's catch-up pass (its forward over the
            # text it has not seen, which its next draft needs anyway) gives its teacher-forced next-token predictions, and a
            # greedy draft from a round's start is accepted for as many tokens as they match the text from there (the draft's
            # context is the text until the first mismatch). So before a round of a model drafter's arm, the drafter catches up,
            # the rounds it sat out are counted as its rounds (side observations, as the copiers'), and the policy chooses again:
            # a drafter that would have lost in those rounds is not played to find that out. Per model drafter: its name, the
            # drafter, its arms (length, index) shortest first, and the text lengths at the starts of the rounds it sat out
            observers = [] if not timed or not hasattr(policy, "observe") or self.temperature > 0 else \
                [(name, drafter, sorted((self.arms[i].length, i) for i, arm in enumerate(self.arms) if arm.drafter == name), [])
                 for name, drafter in self.drafters.items() if not drafter.copier and hasattr(drafter, "catch_up")]

            def observe_model(drafter: Any, arms: list[tuple[int, int]], starts: list[int]) -> None:
                """Catch ``drafter`` up on the text and count what its arms would have emitted in the rounds that began at ``starts``."""
                caught = drafter.catch_up(ids, arms[-1][0])
                if caught is not None:
                    begin, predicted = caught
                    longest, longest_arm = arms[-1]
                    for at in starts:
                        if at - 1 < begin:
                            continue
                        accepted = 0
                        while accepted < longest and at + accepted < len(ids) and predicted[at - 1 + accepted - begin] == ids[at + accepted]:
                            accepted += 1
                        if accepted == longest or at + accepted < len(ids):  # refuted, or accepted in full: exact for every length
                            policy.observe(longest_arm, accepted + 1.0)
                        else:  # the text ended while the draft still matched: exact for the lengths it covers
                            covered = [i for length, i in arms if length <= accepted]
                            if covered:
                                policy.observe(covered[-1], self.arms[covered[-1]].length + 1.0)
                starts.clear()

            def copy_drafts() -> tuple[dict[str, list[int]], int]:
                """Each copier's draft at its longest length from here (the played one takes its prefix), and the arms asleep."""
                drafts, asleep = {}, 0
                for name, drafter, _, length, arms in copiers:
                    drafts[name] = drafter.propose(ids, length).tokens
                    if not drafts[name]:
                        asleep |= arms
                return drafts, asleep

            # per side draft not yet covered or refuted by the text: (the copier's longest arm, its length, above, where the draft
            # starts, the draft)
            pending: list[tuple[int, int, float, int, list[int]]] = []
            drafts, asleep = copy_drafts()  # indexes the prompt now: its first round would carry that cost, and the policy the wrong time
            # a timed policy learns from the round and its side observations and chooses the next arm in one call (`_play`)
            play = choose = None
            if timed:
                play, choose = (policy._play, lambda asleep: int(policy._select(None, asleep)[0])) if hasattr(policy, "_play") \
                    else _round_by_public_calls(policy)
            a = fixed if play is None else choose(asleep)
            while len(result.tokens) < max_new_tokens and len(ids) <= self.max_positions:
                if policy is not None and play is None:  # the policy's trusted path (as in the simulator)
                    a = int(policy._select(None)[0])
                caught_up = 0.0  # the chosen model drafter's catch-up pass, taken before the choice: part of its round's time
                for name, drafter, arms, starts in observers:
                    if self.arms[a].drafter == name:
                        tic = time.perf_counter()
                        observe_model(drafter, arms, starts)
                        a = choose(asleep)
                        caught_up = time.perf_counter() - tic if self.arms[a].drafter == name else 0.0
                chosen = self.arms[a]
                remaining = max_new_tokens - len(result.tokens)
                k = min(chosen.length, remaining - 1, self.max_positions - len(ids))
                t0 = time.perf_counter() - caught_up
                draft = Draft([])
                if k > 0:
                    ahead = drafts.get(chosen.drafter)  # taken before the choice: a prefix of it is this arm's draft
                    if ahead is not None:
                        draft = Draft(ahead[:k])
                    else:
                        draft = self.drafters[chosen.drafter].propose(ids, k, temperature=self.temperature, generator=generator)
                        draft.tokens = [int(t) for t in draft.tokens[:k]]
                emitted, cache = self._verify(ids, draft, cache, generator)
                stop = next((i for i, t in enumerate(emitted) if t in self._eos), None)
                if stop is not None:
                    emitted = emitted[: stop + 1]
                emitted = emitted[:remaining]
                seconds = time.perf_counter() - t0  # the round's own time: the copiers' drafts, taken for every round, are no arm's cost
                for name, _, longest, length, _ in copiers:
                    if longest != a and drafts[name]:
                        pending.append((longest, length, float(chosen.length) if name == chosen.drafter else -1.0, len(ids), drafts[name]))
                for name, _, _, starts in observers:
                    if name != chosen.drafter:
                        starts.append(len(ids))
                ids.extend(emitted)
                result.tokens.extend(emitted)
                observed = []
                if pending:
                    waiting = []
                    for item in pending:  # in the order drafted
                        longest, length, above, at, copy = item
                        end = min(len(copy), len(ids) - at)  # the draft's tokens the text has reached
                        accepted = 0
                        while accepted < end and copy[accepted] == ids[at + accepted]:
                            accepted += 1
                        if accepted < end or end == len(copy):  # refuted or covered: exact
                            observed.append((longest, min(accepted, length) + 1.0, above))
                        else:
                            waiting.append(item)
                    pending = waiting
                result.arms.append(a)
                result.emitted.append(len(emitted))
                result.round_seconds.append(seconds)
                if play is not None:
                    drafts, asleep = copy_drafts()
                    a = play(a, float(len(emitted)), max(seconds, 1e-9), observed, asleep)
                elif policy is not None:
                    y = float(len(emitted))
                    if r_max is not None:
                        y = 1.0 + self.max_length * min(1.0, len(emitted) / max(seconds, 1e-9) / r_max)
                    policy._learn(np.array([a]), np.array([policy_reward(policy, y, self.max_length)]), None)
                if emitted[-1] in self._eos:
                    break
        result.seconds = time.perf_counter() - start
        return result
