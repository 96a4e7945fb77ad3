"""What the serving policy costs per round of a real decode, measured against the fixed arm it plays.

On the demo's models and prompts (``genbandit specdec demo``), a serving policy
(``WarmThroughputUCB``) is first warmed on the prompt set in order, as a server would be; from then
on it plays ``suffix:6`` in (nearly) every round, the best fixed arm on these models. The decoder is
then timed on the same prompts with that policy and with the fixed arm, alternating, so the
difference is the policy's own per-round cost (choosing the arm, learning from the round) and
whatever rounds it still spends probing other arms. Reported per repetition (tokens and seconds
summed over the prompts): tokens/s of both and their ratio, in wall time and in this process's CPU
time (which a busy machine's preemptions do not reach); and the policy's time per round (learn and
choose, one call), replayed back to back on the rounds of the last decode (median over rounds).
``benchmarks/specdec_gap.py`` splits the difference into its parts. Run::

    PYTHONPATH=src nice -n 10 python benchmarks/specdec_policy_cost.py [--repeats 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from genbandit.specdec.demo import DEMO_PROMPTS, shipped_decoder

FIXED = "suffix:6"


def _mean_sd(values) -> str:
    values = np.asarray(values)
    return f"{values.mean():.3f} +- {values.std(ddof=1) if values.size > 1 else 0.0:.3f}"


def replay_cost(policy, rounds: list[tuple[int, int, float]], repeats: int = 200) -> float:
    """Median seconds of the policy's round as the decoder calls it (``_play``: learn from the round, choose the next arm),
    replaying ``(arm, tokens, seconds)`` rounds without side observations, back to back (caches warm)."""
    times = []
    for _ in range(repeats):
        for arm, tokens, seconds in rounds:
            start = time.perf_counter()
            policy._play(arm, float(tokens), seconds)
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    args = parser.parse_args(argv)
    decoder, tok = shipped_decoder()
    prompts = [tok.encode(text) for _, text in DEMO_PROMPTS]
    policy = decoder.make_policy("WarmThroughputUCB", seed=0)
    for ids in prompts:  # warm: one pass over the prompt set
        decoder.generate(ids, policy=policy, max_new_tokens=args.max_new_tokens)
    fixed = decoder.arm_index(FIXED)
    rates = {"serving": [], "fixed": []}
    probes, last = 0, None
    for rep in range(args.repeats):
        for name in (["serving", "fixed"] if rep % 2 == 0 else ["fixed", "serving"]):
            tokens, wall, cpu = 0, time.perf_counter(), time.process_time()
            for ids in prompts:
                how = {"policy": policy} if name == "serving" else {"arm": FIXED}
                res = decoder.generate(ids, max_new_tokens=args.max_new_tokens, **how)
                tokens += len(res.tokens)
                if name == "serving":
                    probes += sum(a != fixed for a in res.arms)
                    last = res
            rates[name].append((tokens / (time.perf_counter() - wall), tokens / (time.process_time() - cpu)))
    serving, fixed_rates = np.array(rates["serving"]), np.array(rates["fixed"])
    per_round = replay_cost(policy, list(zip(last.arms, last.emitted, last.round_seconds)))
    print(f"serving policy (warmed) against fixed {FIXED}, {len(prompts)} prompts x {args.max_new_tokens} tokens, "
          f"{args.repeats} repetitions, order alternating; load average {os.getloadavg()[0]:.1f}")
    for k, clock in enumerate(("wall", "CPU")):
        print(f"  {clock} time: serving {serving[:, k].mean():.0f} tokens/s, {FIXED} {fixed_rates[:, k].mean():.0f}, "
              f"ratio per repetition {_mean_sd(serving[:, k] / fixed_rates[:, k])}")
    print(f"  rounds of the serving policy on another arm than {FIXED}: {probes} in {args.repeats * len(prompts)} responses")
    print(f"  policy per round (replayed back to back, median): {per_round * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
