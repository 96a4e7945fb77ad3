"""Where the serving policy's time goes on the demo, each piece as a ratio against ``suffix:6`` in the same run.

On the demo's models and prompts, in the demo's protocol (``genbandit specdec demo``: prompts in
order, one serving chain per repetition carried from prompt to prompt, every method once per
prompt and repetition, the order of the methods alternating), four methods are timed:

* ``fixed``: the fixed arm ``suffix:6`` (the best fixed arm on the shipped models);
* ``forced``: the serving policy's code path with its choice overridden to ``suffix:6`` (it still
  computes its choice, learns from every round and gets the side observations): what the policy
  costs per round, with no round spent on another arm;
* ``no-side``: the serving policy without side observations (the copiers are not asked for drafts
  in rounds they do not play, so none is ever asleep either);
* ``serving``: the serving policy as the decoder runs it.

Reported per method: tokens/s over the prompt set and per class, the ratio to ``fixed`` per
repetition (mean +- sd), rounds on another arm than ``suffix:6``, and the time spent outside the
timed rounds (choosing, learning, side observations) per round; in wall time and in this process's CPU
time (which the preemptions of a busy machine do not reach). Run::

    PYTHONPATH=src nice -n 10 python benchmarks/specdec_gap.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import numpy as np

from genbandit.policies.speculative_serving import WarmThroughputUCB
from genbandit.specdec.decoder import SERVING_POLICY
from genbandit.specdec.demo import DEMO_PROMPTS, shipped_decoder

FIXED = "suffix:6"
METHODS = ["fixed", "forced", "no-side", "serving"]


class Forced(WarmThroughputUCB):
    """The serving policy, its choice computed and then overridden by one arm."""

    def __init__(self, *args, arm: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.arm = arm

    def _select(self, contexts, asleep=0):
        chosen = super()._select(contexts, asleep)
        chosen[:] = self.arm
        return chosen

    def _play(self, *args) -> int:
        super()._play(*args)
        return self.arm


def _mean_sd(values) -> str:
    values = np.asarray(values)
    return f"{values.mean():.3f} +- {values.std(ddof=1) if values.size > 1 else 0.0:.3f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    args = parser.parse_args(argv)
    decoder, tok = shipped_decoder()
    fixed = decoder.arm_index(FIXED)
    params = {"arm_lengths": [a.length for a in decoder.arms], "arm_drafters": [a.drafter or "" for a in decoder.arms]}
    chains = {}
    for r in range(args.repeats):
        chains[("forced", r)] = Forced(len(decoder.arms), arm=fixed, seed=r, **params)
        chains[("no-side", r)] = decoder.make_policy(SERVING_POLICY, seed=r)
        chains[("serving", r)] = decoder.make_policy(SERVING_POLICY, seed=r)
    for chain in chains.values():
        chain.reset()  # the state allocated (and the kernels compiled) before anything is timed
    # per (method, repetition, kind): tokens, seconds; per method: probes per arm, seconds outside the rounds, rounds
    sums = collections.defaultdict(lambda: np.zeros(3))
    probes = {m: collections.Counter() for m in METHODS}
    outside = collections.defaultdict(float)
    rounds = collections.Counter()
    load = [os.getloadavg()[0]]
    for p, (kind, text) in enumerate(DEMO_PROMPTS):
        ids = tok.encode(text)
        decoder.generate(ids, arm="plain", max_new_tokens=8)
        for r in range(args.repeats):
            for method in METHODS if (p + r) % 2 == 0 else METHODS[::-1]:
                for drafter in decoder.drafters.values():
                    drafter.copier = method != "no-side" and drafter.name != "model"
                how = {"arm": FIXED} if method == "fixed" else {"policy": chains[(method, r)]}
                cpu = time.process_time()
                res = decoder.generate(ids, max_new_tokens=args.max_new_tokens, **how)
                sums[(method, r, kind)] += (len(res.tokens), res.seconds, time.process_time() - cpu)
                probes[method].update(res.arm_labels[a] for a in res.arms if a != fixed)
                outside[method] += res.seconds - res.prefill_seconds - sum(res.round_seconds)
                rounds[method] += res.rounds
        print(f"prompt {p} ({kind}) done, load average {os.getloadavg()[0]:.1f}", flush=True)
    load.append(os.getloadavg()[0])
    print(f"\n{len(DEMO_PROMPTS)} prompts x {args.max_new_tokens} tokens, {args.repeats} repetitions, order alternating; "
          f"load average {load[0]:.1f} at the start, {load[1]:.1f} at the end")

    def rate(method, r, kinds, clock):
        total = sum(sums[(method, r, k)] for k in kinds)
        return total[0] / total[clock]

    for method in METHODS:
        for clock, name in ((1, "wall"), (2, "CPU")):
            cells = []
            for kinds, title in ((("code", "text"), "all"), (("code",), "code"), (("text",), "text")):
                rates = np.array([rate(method, r, kinds, clock) for r in range(args.repeats)])
                ratio = rates / np.array([rate("fixed", r, kinds, clock) for r in range(args.repeats)])
                cells.append(f"{title} {rates.mean():.0f} tokens/s, / {FIXED} {_mean_sd(ratio)}")
            print(f"{method:>8} {name:>4}: " + "; ".join(cells))
        print(f"{'':>8}  rounds {rounds[method]}, on another arm: {sum(probes[method].values())} {dict(probes[method])}; "
              f"outside the rounds {outside[method] / max(rounds[method], 1) * 1e6:.1f} us per round")
    return 0


if __name__ == "__main__":
    sys.exit(main())
