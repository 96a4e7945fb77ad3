"""The demo's serving chains replayed offline: many chains, the demo's exact acceptances, measured round times.

Under greedy decoding the target's text does not depend on the arms, and every drafter's draft is a
function of the text so far, so for each demo prompt (``genbandit specdec demo``) the number of
draft tokens each drafter would get accepted at each output position is fixed. This script records
it once (every drafter, every position), times every fixed arm's rounds on the demo's models once
(alternated, 2 repetitions) for a round-time model (the median per drafter and draft length,
linear in the draft length), and then replays serving chains of the 8 prompts (the demo's order,
and shuffled) in pure Python: the policy sees each round's tokens and a time drawn as the model's
time times a factor resampled from the measured rounds' spread around their median (a shared
machine's preemptions included), the side observations the decoder gives it (here at once;
the decoder gives each when the text has covered or refuted the copier's draft, a round or two later)
and the copiers asleep at each position (no draft: not to be chosen). Reported: the
chain's tokens/s (model times, noise-free) over the best fixed arm's, per class of prompt, mean,
standard deviation and the worst chain. Run::

    PYTHONPATH=src nice -n 10 python benchmarks/specdec_replay.py [--chains 40] [--param discount=0.97] [--record FILE]

(``--record FILE``: keep the recording in ``FILE`` and reuse it when it exists, to compare parameters on one recording.)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time

import numpy as np
import torch

from genbandit.specdec import SpeculativeDecoder
from genbandit.specdec.decoder import SERVING_POLICY
from genbandit.specdec.demo import DEMO_PROMPTS, LENGTHS, shipped_decoder
from genbandit.specdec.demo_training import SHIPPED_DIR, load_tokenizer


def make_decoder() -> SpeculativeDecoder:
    """The demo's decoder: its shipped models, its drafters and lengths, one torch thread."""
    return shipped_decoder()[0]


def record(max_new_tokens: int):
    """Per prompt: its kind, the greedy continuation's length, and per drafter and position the draft length and acceptance;
    and every fixed arm's measured rounds ``(arm, drafted tokens, seconds)``."""
    decoder = make_decoder()
    drafters = decoder.drafters
    tok = load_tokenizer(SHIPPED_DIR)
    longest = max(LENGTHS)
    prompts = []
    with torch.no_grad():
        for kind, text in DEMO_PROMPTS:
            ids = tok.encode(text)
            text_ids = decoder.generate(ids, arm="plain", max_new_tokens=max_new_tokens).tokens
            table = {}
            for name, drafter in drafters.items():
                drafter.start(len(ids))
                lengths, accepted = [], []
                for pos in range(len(text_ids)):
                    tokens = drafter.propose(ids + text_ids[:pos], longest).tokens
                    a = 0
                    while a < len(tokens) and pos + a < len(text_ids) and tokens[a] == text_ids[pos + a]:
                        a += 1
                    lengths.append(len(tokens))
                    accepted.append(a)
                table[name] = (lengths, accepted)
            prompts.append((kind, len(text_ids), table))
    rounds = []
    for r in range(2):
        for p, (kind, text) in enumerate(DEMO_PROMPTS):
            ids = tok.encode(text)
            labels = [arm.label for arm in decoder.arms]
            for label in labels if (p + r) % 2 == 0 else labels[::-1]:
                res = decoder.generate(ids, arm=label, max_new_tokens=max_new_tokens)
                arm = decoder.arms[decoder.arm_index(label)]
                pos = 0
                for emitted, seconds in zip(res.emitted, res.round_seconds):
                    drafted = 0 if arm.drafter is None else min(arm.length, prompts[p][2][arm.drafter][0][pos], prompts[p][1] - pos - 1)
                    rounds.append((decoder.arm_index(label), drafted, seconds))
                    pos += emitted
    return decoder, prompts, rounds


class Replay:
    """Serving chains over the recorded prompts, round times from the fitted model with resampled noise."""

    def __init__(self, decoder, prompts, rounds):
        self.arms = decoder.arms
        self.prompts = prompts
        by_drafter = collections.defaultdict(list)  # drafter -> (drafted tokens, seconds)
        by_arm = collections.defaultdict(list)
        for arm, drafted, seconds in rounds:
            by_drafter[self.arms[arm].drafter].append((drafted, seconds))
            by_arm[arm].append(seconds)
        # per drafter: median seconds of a round as a line in the drafted tokens (least squares on the medians per length)
        self.line = {}
        for drafter, values in by_drafter.items():
            per_length = collections.defaultdict(list)
            for drafted, seconds in values:
                per_length[drafted].append(seconds)
            xs = np.array(sorted(per_length))
            ys = np.array([np.median(per_length[x]) for x in xs])
            weights = np.array([len(per_length[x]) for x in xs], dtype=float)
            self.line[drafter] = np.polyfit(xs, ys, 1, w=np.sqrt(weights)) if len(xs) > 1 else np.array([0.0, ys[0]])
        self.noise = np.concatenate([np.asarray(v) / np.median(v) for v in by_arm.values()])

    def seconds(self, arm: int, drafted: int) -> float:
        slope, intercept = self.line[self.arms[arm].drafter]
        return intercept + slope * drafted

    def asleep(self, p: int, pos: int) -> int:
        """A bit per arm of the copiers with no draft at ``pos`` of prompt ``p`` (their round would be a plain one)."""
        table = self.prompts[p][2]
        return sum(1 << i for i, arm in enumerate(self.arms) if arm.drafter in ("pld", "suffix") and table[arm.drafter][0][min(pos, len(table[arm.drafter][0]) - 1)] == 0)

    def respond(self, p: int, arm: int, play, side: bool, rng) -> tuple[int, float]:
        """One response to prompt ``p`` from ``arm``: (tokens, model seconds). ``play(arm, tokens, seconds, observed, asleep)``
        returns the next arm; ``observed`` and ``asleep`` as the decoder gives them (``side``: the copiers' side observations,
        of those with a draft)."""
        _, n, table = self.prompts[p]
        pos, clean = 0, 0.0
        while pos < n:
            chosen = self.arms[arm]
            k = min(chosen.length, n - pos - 1)
            drafted = min(k, table[chosen.drafter][0][pos]) if chosen.drafter else 0
            accepted = min(table[chosen.drafter][1][pos], drafted) if chosen.drafter else 0
            emitted = min(accepted + 1, n - pos)
            seconds = self.seconds(arm, drafted)
            clean += seconds
            observed = []
            for name in ("pld", "suffix") if side else ():  # each copier's longest arm, unless it played (here resolved at once)
                j = max((i for i, other in enumerate(self.arms) if other.drafter == name), key=lambda i: self.arms[i].length)
                if j != arm and table[name][0][pos] > 0:
                    above = float(chosen.length) if chosen.drafter == name else -1.0
                    observed.append((j, min(table[name][1][pos], table[name][0][pos], self.arms[j].length) + 1.0, above))
            pos += emitted
            arm = play(arm, float(emitted), seconds * rng.choice(self.noise), observed, self.asleep(p, pos))
        return n, clean

    def fixed(self, arm: int) -> list[tuple[int, float]]:
        rng = np.random.default_rng(0)
        return [self.respond(p, arm, lambda a, *_: a, False, rng) for p in range(len(self.prompts))]

    def chain(self, policy, order, rng) -> list[tuple[int, float]]:
        out = {}
        for p in order:
            policy.begin_response()
            out[p] = self.respond(p, int(policy._select(None, self.asleep(p, 0))[0]), policy._play, True, rng)
        return [out[p] for p in range(len(order))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, default=40)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--param", action="append", default=[], help="NAME=VALUE, a parameter of the serving policy")
    parser.add_argument("--record", help="a JSON file to keep the recording in (reused when it exists)")
    args = parser.parse_args()
    params = {name: float(value) for name, value in (item.split("=", 1) for item in args.param)}
    start = time.perf_counter()
    if args.record and os.path.isfile(args.record):
        saved = json.loads(open(args.record).read())
        decoder = make_decoder()
        prompts, rounds = saved["prompts"], saved["rounds"]
        print(f"recording read from {args.record}")
    else:
        decoder, prompts, rounds = record(args.max_new_tokens)
        print(f"recorded {len(prompts)} prompts and {len(rounds)} timed rounds in {time.perf_counter() - start:.0f} s")
        if args.record:
            with open(args.record, "w") as handle:
                json.dump({"prompts": prompts, "rounds": rounds}, handle)
    replay = Replay(decoder, prompts, rounds)
    kinds = [kind for kind, _, _ in prompts]
    classes = {"copy-heavy code": "code", "free text": "text", "all prompts": None}

    def rate(results, kind):
        chosen = [i for i, k in enumerate(kinds) if kind is None or k == kind]
        return sum(results[i][0] for i in chosen) / sum(results[i][1] for i in chosen)

    fixed = {a: replay.fixed(a) for a in range(len(decoder.arms))}
    best = {title: max(fixed, key=lambda a: rate(fixed[a], kind)) for title, kind in classes.items()}
    print("best fixed arm: " + ", ".join(f"{title} {decoder.arms[a].label}" for title, a in best.items()))
    for shuffle in (False, True):
        ratios = collections.defaultdict(list)
        rng = np.random.default_rng(1)
        for c in range(args.chains):
            order = list(range(len(prompts)))
            if shuffle:
                rng.shuffle(order)
            policy = decoder.make_policy(SERVING_POLICY, seed=c, **params)
            results = replay.chain(policy, order, rng)
            for title, kind in classes.items():
                ratios[title].append(rate(results, kind) / rate(fixed[best[title]], kind))
        print(f"{SERVING_POLICY} {params or ''} / best fixed arm, {args.chains} chains, {'shuffled order' if shuffle else 'demo order'}: "
              + "; ".join(f"{title} {np.mean(v):.3f} +- {np.std(v, ddof=1):.3f} (worst {np.min(v):.3f})" for title, v in ratios.items()))


if __name__ == "__main__":
    main()
