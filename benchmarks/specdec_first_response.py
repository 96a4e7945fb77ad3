"""Where a fresh serving chain's first response spends its time, against ``suffix:6`` on the same prompt, alternated.

The serving policy (``WarmThroughputUCB``) carries what it learned from response to response; its first
response starts from nothing, and there it still tries the arms it knows nothing of. This benchmark
times that first response on the demo's first prompt (``genbandit specdec demo``'s models, greedy, 256
new tokens): a fresh policy each repetition, beside the fixed arm ``suffix:6``, the order alternating.
Per method and repetition it splits the response's wall time into

* the target's verification passes (``SpeculativeDecoder._verify``, every round's);
* the draft model's own passes: its catch-up passes (``ModelDrafter.catch_up``, which the decoder makes
  before a round of the draft model's arms to observe the rounds it sat out) and its drafts;
* everything else: the prefill, the copiers' drafts, the policy's choices and the side observations.

It also counts the rounds, the draft model's rounds and its catch-up passes. With ``--chains N`` it gives the same
parts for every response of N fresh serving chains over the demo's prompts in order (no fixed arm beside them). Run::

    PYTHONPATH=src nice -n 10 python benchmarks/specdec_first_response.py [--repeats 8] [--prompt 0]
    PYTHONPATH=src nice -n 10 python benchmarks/specdec_first_response.py --chains 2 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from genbandit.specdec.demo import DEMO_PROMPTS, shipped_decoder
from genbandit.specdec.drafters import ModelDrafter

FIXED = "suffix:6"
SERVING = "WarmThroughputUCB"


class _Clock:
    """Seconds and calls booked per part, around the methods it wraps on their instances."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, owner, name: str, part: str) -> None:
        method = getattr(owner, name)

        def timed(*args, **kwargs):
            tic = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[part] = self.seconds.get(part, 0.0) + time.perf_counter() - tic
                self.calls[part] = self.calls.get(part, 0) + 1

        setattr(owner, name, timed)

    def clear(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def measure(repeats: int, prompt: int = 0, max_new_tokens: int = 256) -> dict[str, list[dict]]:
    """Per method (``suffix:6``, then the serving policy), one row per repetition: the response's ``ms``, ``rounds``, the
    milliseconds of each part (``verification``, ``draft model: catch-up``, ``draft model: drafts``, ``else``), the
    ``model rounds`` and the ``catch-ups``."""
    decoder, tokenizer, clock = _timed_decoder()
    ids = tokenizer.encode(DEMO_PROMPTS[prompt][1])
    labels = [arm.label for arm in decoder.arms]
    decoder.generate(ids, arm="plain", max_new_tokens=8)  # this prompt's code paths warm
    rows: dict[str, list[dict]] = {FIXED: [], SERVING: []}
    for rep in range(repeats):
        for method in (list(rows) if rep % 2 == 0 else list(rows)[::-1]):
            how = {"arm": FIXED} if method == FIXED else {"policy": decoder.make_policy(method, seed=rep)}
            if "policy" in how:
                how["policy"].reset()
            clock.clear()
            res = decoder.generate(ids, max_new_tokens=max_new_tokens, **how)
            rows[method].append(_row(res, clock, labels))
    return rows


def measure_chain(chains: int, max_new_tokens: int = 256) -> list[list[dict]]:
    """The same parts for every response of ``chains`` fresh serving chains over the demo's prompts in order, as the demo
    plays them: one list of rows (one per prompt) per chain."""
    decoder, tokenizer, clock = _timed_decoder()
    prompts = [tokenizer.encode(text) for _, text in DEMO_PROMPTS]
    labels = [arm.label for arm in decoder.arms]
    decoder.generate(prompts[0], arm="plain", max_new_tokens=8)
    out = []
    for chain in range(chains):
        policy = decoder.make_policy(SERVING, seed=chain)
        policy.reset()
        rows = []
        for ids in prompts:
            clock.clear()
            rows.append(_row(decoder.generate(ids, max_new_tokens=max_new_tokens, policy=policy), clock, labels))
        out.append(rows)
    return out


def _timed_decoder():
    """The demo's decoder with its verification passes and its draft model's catch-up passes and drafts timed."""
    decoder, tokenizer = shipped_decoder(1)
    clock = _Clock()
    clock.wrap(decoder, "_verify", "verification")
    for drafter in decoder.drafters.values():
        if isinstance(drafter, ModelDrafter):
            clock.wrap(drafter, "catch_up", "draft model: catch-up")
            clock.wrap(drafter, "propose", "draft model: drafts")
    return decoder, tokenizer, clock


def _row(res, clock: _Clock, labels: list[str]) -> dict:
    parts = {part: 1e3 * s for part, s in clock.seconds.items()}
    return {"ms": 1e3 * res.seconds, "rounds": res.rounds, "model rounds": sum(labels[a].startswith("model") for a in res.arms),
            "catch-ups": clock.calls.get("draft model: catch-up", 0), **parts, "else": 1e3 * res.seconds - sum(parts.values())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=0, help="which of the demo's prompts (default 0, the first of its chain)")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--chains", type=int, default=0, help="instead: the parts of every response of this many fresh serving chains over the demo's prompts")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    keys = ["ms", "rounds", "verification", "draft model: catch-up", "draft model: drafts", "else", "model rounds", "catch-ups"]
    if args.chains:
        print(f"Every response of {args.chains} fresh {SERVING} chains over the demo's prompts, {args.max_new_tokens} new tokens; load average "
              f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end ({time.strftime('%H:%M UTC', time.gmtime())}).\n")
        print("| chain | prompt | " + " | ".join(keys) + " |")
        print("|---|---|" + "---|" * len(keys))
        for chain, rows in enumerate(measure_chain(args.chains, args.max_new_tokens)):
            for prompt, row in enumerate(rows):
                print(f"| {chain} | {prompt} | " + " | ".join(f"{row.get(key, 0.0):.1f}" for key in keys) + " |")
        return 0
    rows = measure(args.repeats, args.prompt, args.max_new_tokens)
    print(f"First response of a fresh chain, demo prompt {args.prompt} ({DEMO_PROMPTS[args.prompt][0]}), {args.max_new_tokens} new tokens, "
          f"{args.repeats} repetitions alternating; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
          f"({time.strftime('%H:%M UTC', time.gmtime())}). Mean +- standard error over repetitions.\n")
    print("| method | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for method, got in rows.items():
        cells = []
        for key in keys:
            v = np.array([row.get(key, 0.0) for row in got])
            cells.append(f"{v.mean():.1f} +- {v.std(ddof=1) / np.sqrt(len(v)):.1f}" if len(v) > 1 else f"{v.mean():.1f}")
        print(f"| {method} | " + " | ".join(cells) + " |")
    ratio = np.array([f["ms"] / s["ms"] for f, s in zip(rows[FIXED], rows[SERVING])])
    print(f"\n{SERVING}'s tokens/s over {FIXED}'s, per repetition: {ratio.mean():.3f} +- {ratio.std(ddof=1) / np.sqrt(len(ratio)):.3f} "
          "(mean +- standard error)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
